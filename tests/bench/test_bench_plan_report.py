"""Planning the sweep, time-left estimates, prompts and the report formats (no server)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from composer.bench.client import Acceptance, StreamResult
from composer.bench.prompts import BUILTIN_PROMPTS, padded, read_prompt_file
from composer.bench.report import csv_text, format_table, report_data, write_outputs
from composer.bench.sweep import (
    SINGLE_STREAM,
    BenchOptions,
    BenchPoint,
    BenchReport,
    Eta,
    PointResult,
    Workload,
    compare_with_baseline,
    format_duration,
    k_override,
    percentile,
    plan_points,
)
from composer.errors import UsageError
from composer.render.target import resolve_target
from composer.stack.load import load_stack

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def stack(tmp_path: Path):
    env = tmp_path / "empty.env"
    env.write_text("")
    return load_stack([REPO / "composer.toml"], env, environ={})


def run(tok_s: float, text: str = "a b c") -> StreamResult:
    return StreamResult(text, 101, 10, 0.05, 0.05 + 100 / tok_s, 100 / tok_s, 50)


def result(variant: str, k: int, tok_s: list[float], text: str = "a b c", per_pos=()) -> PointResult:
    point = BenchPoint(variant, None if k == 0 else variant, k)
    acc = None
    if k:
        acc = Acceptance(100, 100 * k, int(sum(per_pos) * 100), sum(per_pos) / k, 1 + sum(per_pos), per_pos)
    return PointResult(point, [run(t, text) for t in tok_s], acc, {0: [text] * (len(tok_s) + 1)})


def test_plan_sweeps_k_for_speculative_variants_only(stack) -> None:
    points = plan_points(stack, ["baseline", "mtp", "dflash2"], [7, 3, 3])
    assert [(p.variant, p.k) for p in points] == [
        ("baseline", 0),
        ("mtp", 3),
        ("mtp", 7),
        ("dflash2", 3),
        ("dflash2", 7),
    ]
    assert k_override(points[2]) == ("variants.mtp.speculative.num_speculative_tokens=7",)
    assert k_override(points[0]) == ()


def test_plan_default_ks_include_the_configured_k(stack) -> None:
    assert [p.k for p in plan_points(stack, ["mtp"], None)] == [1, 3, 4, 7, 10]
    assert [p.k for p in plan_points(stack, ["dflash2"], None, {"dflash2": 5})] == [1, 3, 4, 5, 7, 10]
    with pytest.raises(UsageError, match="unknown variant"):
        plan_points(stack, ["nope"], None)
    with pytest.raises(UsageError, match="positive"):
        plan_points(stack, ["mtp"], [0])


def test_k_override_renders_a_different_container(stack, tmp_path: Path) -> None:

    env = tmp_path / "empty.env"
    flags = k_override(BenchPoint("mtp", "mtp", 3))
    with_k3 = load_stack([REPO / "composer.toml"], env, environ={}, flags=flags)
    assert with_k3.variant("mtp").speculative.num_speculative_tokens == 3
    hashes = {resolve_target(s, "mtp").spec.hash for s in (stack, with_k3)}
    assert len(hashes) == 2


def test_eta() -> None:
    eta = Eta(points=3, requests_per_point=4)
    assert eta.seconds_left(4) is None
    eta.requests += [1.0, 1.0]
    eta.swaps.append(5.0)
    # 2 requests left here, then 2 points of 4 requests and 2 swaps
    assert eta.seconds_left(2) == pytest.approx(2 + 8 + 10)
    assert eta.seconds_left(4, swap_pending=True) == pytest.approx(4 + 8 + 15)
    assert format_duration(None) == "time left: estimating"
    assert format_duration(65) == "about 1m05s left"
    assert format_duration(7.4) == "about 7s left"


def test_options_are_validated() -> None:
    with pytest.raises(UsageError):
        BenchOptions(prompts=("p",), runs=0)
    with pytest.raises(UsageError):
        BenchOptions(prompts=())


def test_prompts(tmp_path: Path) -> None:
    long = BenchOptions(prompts=BUILTIN_PROMPTS).prompts_for(Workload(500))
    assert all(1900 <= len(p) <= 2100 and p.endswith(b) for p, b in zip(long, BUILTIN_PROMPTS, strict=True))
    assert padded("short", 1) == "short"
    file = tmp_path / "prompts.txt"
    file.write_text("first prompt\nsecond line\n---\n\n---\nsecond prompt\n")
    assert read_prompt_file(file) == ("first prompt\nsecond line", "second prompt")
    with pytest.raises(UsageError, match="cannot read"):
        read_prompt_file(tmp_path / "missing.txt")


def sample_report() -> BenchReport:
    report = BenchReport(
        [
            result("baseline", 0, [29.0, 30.0, 29.4], "a b c d"),
            result("mtp", 3, [47.0, 48.0], "a b c d", (0.9, 0.8, 0.7)),
            result("mtp", 7, [59.0, 60.0, 58.0], "a b x d", (0.87, 0.79, 0.69, 0.54, 0.44, 0.28, 0.21)),
            PointResult(BenchPoint("dflash2", "dflash", 10), error="dflash2 failed: boom"),
        ],
        BenchOptions(prompts=("p",)),
        hints=("dflash2: start at K=7",),
    )
    compare_with_baseline(report)
    return report


def test_medians_best_k_speedup_and_agreement() -> None:
    report = sample_report()
    base, k3, k7, failed = report.results
    assert base.decode_tok_s == pytest.approx(29.4)
    assert k3.decode_tok_s == pytest.approx(47.5)
    assert {name: r.point.k for name, r in report.best_k().items()} == {"mtp": 7}
    assert k7.speedup == pytest.approx(59.0 / 29.4)
    assert k7.agreement.percent == 75.0
    assert k3.agreement.percent == 100.0
    assert base.agreement is None  # the reference itself
    assert k7.deterministic is True
    assert not failed.ok and failed.speedup is None


def test_no_baseline_is_noted() -> None:
    report = BenchReport([result("mtp", 3, [40.0], per_pos=(0.5, 0.4, 0.3))], BenchOptions(prompts=("p",)))
    compare_with_baseline(report)
    assert report.results[0].speedup is None
    assert "no baseline" in report.notes[0]


def test_table_and_files(tmp_path: Path) -> None:
    report = sample_report()
    table = format_table(report)
    assert "mtp       7" in table
    assert ".87/.79/.69/.54/.44/.28/.21" in table
    assert "best K for mtp: 7 at 59.0 tok/s (2.01x baseline)" in table
    assert "dflash2   10  dflash2 failed: boom" in table
    assert "hint: dflash2: start at K=7" in table

    data = report_data(report)
    assert data["best_k"] == {"mtp": 7}
    assert data["points"][2]["per_position"][0] == 0.87
    assert data["points"][2]["agreement_percent"] == 75.0
    json.dumps(data)

    rows = list(csv.DictReader(io.StringIO(csv_text(report))))
    assert [r["k"] for r in rows] == ["0", "3", "7", "10"]
    assert rows[1]["per_position"] == "0.9/0.8/0.7"
    assert rows[3]["error"] == "dflash2 failed: boom"

    written = write_outputs(report, tmp_path / "out")
    names = {p.name for p in written}
    assert {"bench.json", "bench.csv"} <= names
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "bench.png" not in names
        assert any("matplotlib" in n for n in report.notes)
    else:
        png = tmp_path / "out" / "bench.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_workloads_padding_and_percentiles() -> None:
    options = BenchOptions(prompts=("question?",), concurrency=(1, 4), prompt_tokens=(128, 2000))
    assert options.workloads() == [Workload(128, 1), Workload(128, 4), Workload(2000, 1), Workload(2000, 4)]
    assert options.multi and not BenchOptions(prompts=("p",)).multi
    (long,) = options.prompts_for(Workload(2000, 4))
    assert long.endswith("question?") and 7900 <= len(long) <= 8010
    assert BenchOptions(prompts=("p",)).prompts_for(SINGLE_STREAM) == ("p",)
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert percentile([], 95) is None
    with pytest.raises(UsageError, match="--concurrency"):
        BenchOptions(prompts=("p",), concurrency=(0,))


def workload_result(variant: str, k: int, workload: Workload, tok_s: float, wall: float) -> PointResult:
    r = result(variant, k, [tok_s] * 4, per_pos=(0.8,) * k)
    r.workload, r.wall_s = workload, wall
    return r


def test_workload_report_table_csv_and_a_plot_per_concurrency(tmp_path: Path) -> None:
    options = BenchOptions(prompts=("p",), concurrency=(1, 16), prompt_tokens=(128, 16000))
    results = []
    for tokens in (128, 16000):
        results += [
            workload_result("baseline", 0, Workload(tokens, 1), 30.0, 404 / 30.0),
            workload_result("mtp", 7, Workload(tokens, 1), 60.0, 404 / 60.0),
            workload_result("baseline", 0, Workload(tokens, 16), 28.0, 404 / 450.0),
            workload_result("mtp", 7, Workload(tokens, 16), 21.0, 404 / 330.0),
        ]
    report = BenchReport(results, options)
    compare_with_baseline(report)
    mtp16 = results[3]
    assert mtp16.aggregate_tok_s == pytest.approx(330.0)
    assert mtp16.aggregate_speedup == pytest.approx(330.0 / 450.0)  # against the baseline of its workload
    assert mtp16.speedup == pytest.approx(21.0 / 28.0)
    assert results[1].aggregate_speedup == pytest.approx(2.0)
    table = format_table(report)
    header = table.splitlines()[0]
    assert (
        "prompt" in header and "streams" in header and "agg tok/s" in header and "TTFT p50/p95 ms" in header
    )
    assert "best K for mtp: 7 at 60.0 tok/s (2.00x baseline) (128 tok x 1 stream)" in table
    rows = list(csv.DictReader(io.StringIO(csv_text(report))))
    assert [(r["prompt_tokens"], r["concurrency"]) for r in rows[:4]] == [
        ("128", "1"),
        ("128", "1"),
        ("128", "16"),
        ("128", "16"),
    ]
    assert float(rows[3]["aggregate_tok_s"]) == pytest.approx(330.0)
    data = report_data(report)
    assert data["options"]["concurrency"] == [1, 16] and data["points"][3]["aggregate_speedup"] == 0.733
    written = {p.name for p in write_outputs(report, tmp_path / "out")}
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert written == {"bench.json", "bench.csv"}
        assert any("matplotlib" in n for n in report.notes)
    else:
        assert written == {"bench.json", "bench.csv", "bench-c1.png", "bench-c16.png"}


def test_served_k_comes_from_the_draft_positions_not_the_mean_draft_length() -> None:
    """Real ngram drafts fewer than K tokens on some steps: K is read from the positions."""
    from composer.bench.client import SpecCounters
    from composer.bench.sweep import BenchPoint, PointResult, _check_acceptance
    from composer.errors import BenchError

    short_drafts = SpecCounters(
        drafts=10, draft_tokens=21, accepted=9, accepted_per_pos=(5, 3, 1), generation_tokens=30
    )
    result = PointResult(BenchPoint("ngram", "ngram", 3))
    _check_acceptance(result, short_drafts)
    assert result.acceptance is not None
    wrong_k = SpecCounters(
        drafts=10, draft_tokens=50, accepted=9, accepted_per_pos=(5, 3, 1, 0, 0), generation_tokens=30
    )
    with pytest.raises(BenchError, match="shows 5 draft token"):
        _check_acceptance(PointResult(BenchPoint("ngram", "ngram", 3)), wrong_k)
