"""observability/grafana-dashboard.json against Grafana's dashboard JSON model: the fields an
import needs, unique panel ids, a grid of 24 columns without overlaps, every query on the
`$datasource` variable, and the served-model-name variable on every vLLM expression."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DASHBOARD = Path(__file__).resolve().parents[2] / "observability" / "grafana-dashboard.json"
TOP_LEVEL = {
    "title": str,
    "uid": str,
    "schemaVersion": int,
    "panels": list,
    "templating": dict,
    "time": dict,
    "editable": bool,
    "annotations": dict,
}
PANEL_TYPES = {"row", "timeseries", "stat", "bargauge", "gauge", "table"}


def expressions(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) for every query of every panel."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def test_the_top_level_fields_of_the_json_model(dashboard) -> None:
    for key, kind in TOP_LEVEL.items():
        assert isinstance(dashboard.get(key), kind), key
    assert "id" not in dashboard or dashboard["id"] is None  # an import must not name a database id
    assert dashboard["schemaVersion"] >= 36
    assert {"from", "to"} <= dashboard["time"].keys()


def test_panels_have_unique_ids_and_fit_the_grid_without_overlap(dashboard) -> None:
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        assert panel["type"] in PANEL_TYPES, panel["type"]
        grid = panel["gridPos"]
        assert set(grid) == {"h", "w", "x", "y"} and grid["w"] > 0 and grid["h"] > 0
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {(grid["x"] + dx, grid["y"] + dy) for dx in range(grid["w"]) for dy in range(grid["h"])}
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine


def test_every_query_uses_the_datasource_variable_and_has_a_ref_id(dashboard) -> None:
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            assert target["expr"].strip()


def test_the_variables_exist_and_every_expression_is_filtered_by_them(dashboard) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    assert variables["model"]["label"] == "Served model name"
    assert "model_name" in variables["model"]["definition"]
    assert "gateway" in variables
    seen_vllm = seen_gateway = 0
    for title, expr in expressions(dashboard):
        if "vllm:" in expr:
            seen_vllm += 1
            assert expr.count("vllm:") == expr.count('model_name=~"$model"'), title
        if "gateway_" in expr:
            seen_gateway += 1
            assert expr.count("gateway_") == expr.count('job=~"$gateway"'), title
        assert "vllm:" in expr or "gateway_" in expr, title
    assert seen_vllm >= 8 and seen_gateway >= 10


def test_the_dashboard_covers_what_the_issue_lists(dashboard) -> None:
    exprs = " ".join(expr for _, expr in expressions(dashboard))
    for metric in (
        "gateway_requests_total",
        "gateway_held_requests",
        "gateway_hold_seconds_bucket",
        "gateway_drains_total",
        "gateway_cut_requests_total",
        "gateway_switches_total",
        "gateway_wakes_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "vllm:kv_cache_usage_perc",
    ):
        assert metric in exprs, metric
