"""The sweep's swap and restore logic, with the lifecycle replaced by a recorder (no Docker)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

import composer.swap.down
import composer.swap.entry
import composer.swap.outcome
import composer.swap.snapshot
from composer.bench import swaps as bench_swap
from composer.bench.sweep import BenchOptions, BenchPoint, PointResult
from composer.engine.containers import RunningVariant
from composer.errors import BenchError, SwapFailed
from composer.render.target import resolve_target
from composer.stack.load import load_stack

REPO = Path(__file__).resolve().parents[2]


def stack_for(tmp_path: Path, *settings: str):
    """The shipped stack with an empty env file and `settings` (`--set` values) before the flags."""
    env = tmp_path / "empty.env"
    env.write_text("")
    return lambda flags: load_stack([REPO / "composer.toml"], env, environ={}, flags=(*settings, *flags))


def running(variant: str, config_hash: str) -> RunningVariant:
    return RunningVariant(
        "id", "vllm-vllm-1", variant, config_hash, "img", "running", None, None, 8000, "m", None, 0
    )


@dataclass
class FakeDocker:
    """Stands in for lifecycle.up/down and the snapshot's serving variant."""

    serving: tuple[str, str] | None
    calls: list[str] = field(default_factory=list)
    fail_k: int | None = None
    interrupt_k: int | None = None
    rollbacks: list[bool] = field(default_factory=list)

    def up(self, stack, requested, *, client, options, progress, waiting=None):
        (variant,) = requested
        self.rollbacks.append(options.rollback)
        spec = stack.variant(variant).speculative
        k = spec.num_speculative_tokens if spec else 0
        if k == self.interrupt_k:
            self.calls.append(f"up {variant} K={k} interrupted")
            failed = SwapFailed(f"{variant} failed: interrupted; rolled back", rolled_back=True)
            raise failed from KeyboardInterrupt()
        if k == self.fail_k:
            self.calls.append(f"up {variant} K={k} failed")
            raise SwapFailed(f"{variant} failed: boom; rolled back", rolled_back=True)
        self.calls.append(f"up {variant} K={k}")
        self.serving = (variant, resolve_target(stack, variant).hash)
        return composer.swap.outcome.UpResult(variant=variant, outcome="swapped")

    def down(self, stack, *, client, progress):
        self.calls.append("down")
        stopped = [self.serving[0]] if self.serving else []
        self.serving = None
        return composer.swap.down.UpResult(stack.project, "stopped", stopped=stopped)

    def snapshot(self, stack, client):
        return SimpleNamespace(current=running(*self.serving) if self.serving else None)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    def install(serving, measured=None, fail_k=None, interrupt_k=None) -> FakeDocker:
        docker = FakeDocker(serving, fail_k=fail_k, interrupt_k=interrupt_k)
        monkeypatch.setattr(composer.swap.entry, "up_set", docker.up)
        monkeypatch.setattr(composer.swap.down, "down", docker.down)
        monkeypatch.setattr(composer.swap.snapshot, "take", docker.snapshot)

        def measure(point, options, **_):
            if measured is not None:
                return measured(point)
            return PointResult(point, error=None)

        monkeypatch.setattr("composer.bench.sweep.measure_point", measure)
        return docker

    return install


OPTIONS = BenchOptions(prompts=("p",), runs=1, warmup=0)


def test_previous_variant_with_a_swept_k_is_restored_exactly(tmp_path: Path, fake) -> None:
    load = stack_for(tmp_path)
    k3 = load(("variants.mtp.speculative.num_speculative_tokens=3",))
    docker = fake(("mtp", resolve_target(k3, "mtp").hash))
    report = bench_swap.bench_with_swaps(load, ["baseline", "mtp"], [3, 7], OPTIONS, client=None)
    assert docker.calls == ["up baseline K=0", "up mtp K=3", "up mtp K=7", "up mtp K=3"]
    assert docker.serving == ("mtp", resolve_target(k3, "mtp").hash)
    assert report.notes == ["no baseline point was measured: no speed-up or agreement"]


def test_restores_even_when_a_measurement_fails(tmp_path: Path, fake) -> None:
    load = stack_for(tmp_path)
    docker = fake(("dflash2", resolve_target(load(()), "dflash2").hash), measured=_fail_on_k7)
    with pytest.raises(BenchError, match="lost"):
        bench_swap.bench_with_swaps(load, ["mtp"], [3, 7, 10], OPTIONS, client=None)
    assert docker.calls == ["up mtp K=3", "up mtp K=7", "up dflash2 K=7"]


def _fail_on_k7(point: BenchPoint) -> PointResult:
    if point.k == 7:
        raise BenchError("connection lost")
    return PointResult(point)


def test_failed_swap_is_recorded_and_the_sweep_goes_on(tmp_path: Path, fake) -> None:
    load = stack_for(tmp_path)
    docker = fake(None, fail_k=7)
    report = bench_swap.bench_with_swaps(load, ["mtp"], [3, 7], OPTIONS, client=None)
    failed = [r for r in report.results if r.error]
    assert [r.point.k for r in failed] == [7] and "boom" in failed[0].error
    assert docker.calls[-1] == "down"  # nothing served before the benchmark


def test_unknown_previous_configuration_is_restored_from_the_stack_with_a_note(tmp_path: Path, fake) -> None:
    load = stack_for(tmp_path)
    docker = fake(("mtp", "0123456789abcdef"))
    report = bench_swap.bench_with_swaps(load, ["mtp"], [3], OPTIONS, client=None)
    assert docker.calls == ["up mtp K=3", "up mtp K=7"]
    assert any("0123456789abcdef" in n for n in report.notes)


def test_a_plain_variant_of_another_configuration_is_restored_without_a_k(tmp_path: Path, fake) -> None:
    """baseline has no K: a previous baseline the stack does not reproduce is restored from the
    stack with a note (no `--set` of a speculative setting it lacks)."""
    load = stack_for(tmp_path)
    docker = fake(("baseline", "0123456789abcdef"))
    report = bench_swap.bench_with_swaps(load, ["mtp"], [3], OPTIONS, client=None)
    assert docker.calls == ["up mtp K=3", "up baseline K=0"]
    assert any("0123456789abcdef" in n for n in report.notes)


def test_ks_the_target_cannot_run_are_skipped_not_swapped(tmp_path: Path, fake) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text('{"text_config": {"mtp_num_hidden_layers": 2}}')
    load = stack_for(tmp_path, f"stack.model_dir={target}")
    docker = fake(None)
    report = bench_swap.bench_with_swaps(load, ["mtp"], [2, 3, 4], OPTIONS, client=None)
    assert docker.calls == ["up mtp K=2", "up mtp K=4", "down"]
    skipped = {r.point.k: r.error for r in report.results if r.error}
    assert list(skipped) == [3] and skipped[3].startswith("skipped: K=3 exceeds the 2 MTP layer(s)")
    assert any("K=3" in h and "reject" in h for h in report.hints)


def test_default_sweep_includes_the_draft_suggested_k(tmp_path: Path, fake) -> None:
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text('{"dflash_config": {"block_size": 9}}')
    load = stack_for(tmp_path, f"stack.draft_dir={draft}")
    fake(None)
    report = bench_swap.bench_with_swaps(load, ["dflash2"], None, OPTIONS, client=None)
    assert [r.point.k for r in report.results] == [1, 3, 4, 7, 8, 10]
    assert any("block_size 9" in h and "K=8" in h for h in report.hints)


def test_interrupt_during_a_swap_keeps_what_was_measured_and_restores_once(tmp_path: Path, fake) -> None:
    load = stack_for(tmp_path)
    docker = fake(("baseline", resolve_target(load(()), "baseline").hash), interrupt_k=7)
    report = bench_swap.bench_with_swaps(load, ["mtp"], [3, 7, 10], OPTIONS, client=None)
    # The point's own swap does not roll back (one load saved); the restore is the only other load.
    assert docker.calls == ["up mtp K=3", "up mtp K=7 interrupted", "up baseline K=0"]
    assert docker.rollbacks == [False, False, True]
    assert report.interrupted == "interrupted at mtp K=7"
    assert [r.point.k for r in report.results] == [3]


def test_interrupt_during_a_measurement_drops_only_that_point(tmp_path: Path, fake) -> None:
    load = stack_for(tmp_path)

    def measured(point: BenchPoint) -> PointResult:
        if point.k == 7:
            raise KeyboardInterrupt
        return PointResult(point)

    docker = fake(None, measured=measured)
    report = bench_swap.bench_with_swaps(load, ["mtp"], [3, 7, 10], OPTIONS, client=None)
    assert docker.calls == ["up mtp K=3", "up mtp K=7", "down"]
    assert [r.point.k for r in report.results] == [3] and report.interrupted == "interrupted at mtp K=7"


def test_report_carries_its_metadata(tmp_path: Path, fake) -> None:
    from composer import __version__

    load = stack_for(tmp_path)
    fake(None)
    report = bench_swap.bench_with_swaps(load, ["baseline", "mtp"], [3], OPTIONS, client=None)
    meta = report.metadata
    assert meta["tool_version"] == __version__
    assert meta["stack_hash"] == bench_swap.stack_hash(load(())) and len(str(meta["stack_hash"])) == 16
    assert meta["config_hashes"] == {n: resolve_target(load(()), n).hash for n in ("baseline", "mtp")}
    assert meta["images"] == {"vllm-openai:qwen38-verified": None}  # no Docker here: unknown ids
    assert meta["started_at"] <= meta["finished_at"]
    assert {"platform", "cpus", "gpus", "docker"} <= set(meta["host"])
    changed = load(("variants.baseline.kv_cache_memory=6G",))
    assert bench_swap.stack_hash(changed) != meta["stack_hash"]
