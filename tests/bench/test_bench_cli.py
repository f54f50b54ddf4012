"""`compose-spec bench` argument handling: usage errors exit 2 before Docker is touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from composer.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")  # fail loudly if reached
    return CliRunner()


def invoke(runner: CliRunner, *args: str):
    return runner.invoke(main, ["--env-file", ".env.demo", "bench", *args])


def test_bad_k_is_a_usage_error(runner: CliRunner) -> None:
    result = invoke(runner, "--k", "3,seven")
    assert result.exit_code == 2
    assert "seven" in result.output


def test_prompt_file_and_tokens_together(runner: CliRunner, tmp_path: Path) -> None:
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello")
    result = invoke(runner, "--prompt-file", str(prompts), "--prompt-tokens", "100")
    assert result.exit_code == 2
    assert "not both" in result.output


def test_zero_runs(runner: CliRunner) -> None:
    result = invoke(runner, "--runs", "0")
    assert result.exit_code == 2
    assert "--runs" in result.output


def test_help_lists_the_options(runner: CliRunner) -> None:
    result = runner.invoke(main, ["bench", "--help"])
    assert result.exit_code == 0
    for option in (
        "--variants",
        "--k",
        "--prompt-file",
        "--prompt-tokens",
        "--max-tokens",
        "--runs",
        "--warmup",
    ):
        assert option in result.output


class _Client:
    def close(self) -> None:
        return None


def fake_sweep(monkeypatch: pytest.MonkeyPatch, results, interrupted: str = "") -> list[dict]:
    """bench_with_swaps replaced by one returning `results`; records how it was called."""
    from composer.bench.sweep import BenchOptions, BenchReport

    calls: list[dict] = []

    def sweep(stack_for, names, ks, options: BenchOptions, **kwargs):
        calls.append(kwargs)
        report = BenchReport(list(results), options, interrupted=interrupted, metadata={"tool_version": "x"})
        return report

    monkeypatch.setattr("composer.bench.swaps.bench_with_swaps", sweep)
    monkeypatch.setattr("composer.engine.client.docker_client", lambda *a, **k: _Client())
    monkeypatch.setenv("VLLM_API_KEY", "sk-test-Jr4uW3dfZ7SWrbnsSTPMvSct")
    return calls


def _run(point, decode: float):
    from composer.bench.client import StreamResult
    from composer.bench.sweep import PointResult

    run = StreamResult(
        "x", completion_tokens=11, prompt_tokens=5, ttft_s=0.1, e2e_s=1.0, decode_s=10 / decode, chunks=11
    )
    return PointResult(point, runs=[run], texts={0: ["x"]})


def test_a_failed_point_exits_1_and_names_it(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from composer.bench.sweep import BenchPoint, PointResult

    ok = _run(BenchPoint("baseline", None, 0), 30.0)
    failed = PointResult(BenchPoint("mtp", "mtp", 7), error="mtp failed: exited with code 1")
    skipped = PointResult(BenchPoint("mtp", "mtp", 9), error="skipped: K=9 exceeds the layers")
    calls = fake_sweep(monkeypatch, [ok, failed, skipped])
    result = invoke(runner, "--variants", "baseline,mtp", "--out", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert "1 point(s) failed: mtp K=7: mtp failed: exited with code 1" in result.stderr
    assert (tmp_path / "out" / "bench.json").is_file()
    assert calls[0]["waiting"] is not None  # the live `loading (Ns)` line goes through LiveLine
    as_json = invoke(runner, "--variants", "baseline,mtp", "--json", "--out", str(tmp_path / "out"))
    data = json.loads(as_json.stdout)  # one object: the report with the error
    assert data["kind"] == "bench" and data["exit_code"] == 1 and len(data["points"]) == 3


def test_interrupt_writes_what_was_measured_and_exits_130(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from composer.bench.sweep import BenchPoint

    fake_sweep(
        monkeypatch, [_run(BenchPoint("baseline", None, 0), 30.0)], interrupted="interrupted at mtp K=3"
    )
    result = invoke(runner, "--variants", "baseline,mtp", "--out", str(tmp_path))
    assert result.exit_code == 130
    assert "interrupted at mtp K=3: wrote the 1 point(s) measured so far" in result.stderr
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert [p["variant"] for p in saved["points"]] == ["baseline"]
    assert saved["interrupted"] == "interrupted at mtp K=3" and saved["metadata"] == {"tool_version": "x"}


def test_plot_y_axis_starts_at_zero() -> None:
    from composer.bench.report import y_limits
    from composer.bench.sweep import BenchOptions, BenchPoint, BenchReport

    points = [_run(BenchPoint("baseline", None, 0), 29.4), _run(BenchPoint("mtp", "mtp", 7), 59.2)]
    report = BenchReport(points, BenchOptions(prompts=("p",)))
    bottom, top = y_limits(report)
    assert bottom == 0.0 and top > 59.2


def test_live_line_prints_stage_changes_only_without_a_tty(capsys: pytest.CaptureFixture[str]) -> None:
    from composer.cli import LiveLine

    line = LiveLine()
    assert not line.tty
    for second in range(5):
        line.waiting(f"mtp: loading ({second}.0s)")
    line.waiting("mtp: weights loaded (5.0s)")
    line.waiting("mtp: weights loaded (6.0s)")
    assert capsys.readouterr().err.splitlines() == ["mtp: loading (0.0s)", "mtp: weights loaded (5.0s)"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--concurrency", "1,0"), "--concurrency values must be positive integers"),
        (("--concurrency", "four"), "four"),
        (("--prompt-tokens", "128,-5"), "--prompt-tokens values must be positive integers"),
    ],
)
def test_bad_workload_lists_are_usage_errors(runner: CliRunner, args: tuple[str, ...], message: str) -> None:
    result = invoke(runner, *args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_help_lists_the_workload_options(runner: CliRunner) -> None:
    result = runner.invoke(main, ["bench", "--help"])
    assert "--concurrency" in result.output and "128,2000,16000" in result.output
