"""A real Prometheus (Debian's `prometheus`) on 127.0.0.1 scrapes the gateway and, through
it, the serving simulator with observability/prometheus.yml (targets moved to the test's
port) during a switch baseline -> mtp under load; then every PromQL expression of the
Grafana dashboard is evaluated through Prometheus' HTTP API and must return data."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import in_ci

from .promlab import (
    CONFIG,
    PROMETHEUS,
    Prometheus,
    dashboard_queries,
    scrape_config,
    wait_for_scrape,
    wait_until,
)
from .statuslab import SERVED, Lab
from .test_dashboard_model import DASHBOARD

pytestmark = pytest.mark.skipif(
    (PROMETHEUS is None) and not in_ci(), reason="Debian's prometheus is not installed (make tools)"
)


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    lab = Lab(tmp_path_factory.mktemp("sims"))
    workdir = Path(tempfile.mkdtemp(prefix="prom-", dir=tmp_path_factory.mktemp("prom")))
    prom = None
    try:
        lab.report_serving("baseline")
        lab.start_load()
        prom = Prometheus(scrape_config(lab.gateway.port), workdir)
        wait_until(prom, 'up{job="vllm"} == 1')
        # the drain counter's value before the switch is in the data (an increase needs two samples)
        wait_until(prom, "gateway_drains_total == 0")
        with lab.switch("mtp"):
            wait_until(prom, "max(gateway_held_requests) >= 1 or max(gateway_hold_active) == 1")
        # ... and a scrape after it: the drain is over once the switch released its hold
        wait_for_scrape(prom, "vllm-composer-gateway", time.time())
        wait_until(prom, 'gateway_serving_variant_info{variant="mtp"} == 1')
        wait_until(
            prom, f'count_over_time(vllm:spec_decode_num_drafts_total{{model_name="{SERVED}"}}[1m]) >= 4'
        )
        yield prom
    finally:
        if prom is not None:
            prom.stop()
        lab.close()


def test_the_scrape_config_is_valid_for_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    done = subprocess.run(
        [promtool, "check", "config", str(CONFIG)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_both_jobs_are_up(scraped: Prometheus) -> None:
    up = {r["metric"]["job"]: r["value"][1] for r in scraped.query("up")}
    assert up == {"vllm-composer-gateway": "1", "vllm": "1"}


@pytest.mark.slow
def test_every_dashboard_expression_returns_data(scraped: Prometheus) -> None:
    empty = []
    for title, concrete in dashboard_queries(SERVED):
        assert "$" not in concrete, concrete
        if not scraped.query(concrete):
            empty.append(f"{title}: {concrete}")
    assert not empty, "expressions without data:\n" + "\n".join(empty)


@pytest.mark.slow
def test_the_switch_shows_in_the_gateway_metrics(scraped: Prometheus) -> None:
    seen = scraped.query('max_over_time(gateway_serving_variant_info{variant="baseline"}[5m])')
    assert seen and seen[0]["value"][1] == "1"
    assert scraped.query("increase(gateway_drains_total[5m]) > 0")


@pytest.mark.slow
def test_the_template_variables_find_their_values(scraped: Prometheus) -> None:
    for label, metric, expected in (
        ("model_name", "vllm:num_requests_running", SERVED),
        ("job", "gateway_backend_ready", "vllm-composer-gateway"),
    ):
        reply = httpx.get(
            f"{scraped.url}/api/v1/label/{label}/values", params={"match[]": metric}, timeout=10
        )
        assert expected in reply.json()["data"], reply.text
        var = re.search(rf"label_values\({re.escape(metric)}, {label}\)", DASHBOARD.read_text())
        assert var, f"the dashboard has no variable over {metric}'s {label}"
