"""The bounded GPU release wait (snapshot before the stop, wait after), with a fake probe."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

import pytest

from composer.capacity.model import release_budget
from composer.errors import GpuProbeError
from composer.probes.gpu import GpuInfo, GpuProcess
from composer.swap import gpu_release
from composer.swap.gpu_release import ReleaseWait
from tests.doctor.fakes import make_stack

GIB = 1 << 30
H200 = 140 * GIB
CONTAINER, FOREIGN = 4242, 777


def gpu(index: int, used_gib: float, processes: Sequence[GpuProcess] = (), total: int = H200) -> GpuInfo:
    used = int(used_gib * GIB)
    return GpuInfo(index, "NVIDIA H200", (9, 0), total, used, total - used, tuple(processes))


def proc(pid: int, gib: float) -> GpuProcess:
    return GpuProcess(pid, "python3", int(gib * GIB))


class ScriptedProbe:
    """Answers each `gpus()` call with the next scripted snapshot; the last one repeats."""

    name = "fake"
    available = True
    reason = ""

    def __init__(self, *snapshots: list[GpuInfo]) -> None:
        self.snapshots = list(snapshots)
        self.calls = 0

    def gpus(self) -> list[GpuInfo]:
        self.calls += 1
        return list(self.snapshots[min(self.calls - 1, len(self.snapshots) - 1)])


class FakeClock:
    """A monotonic clock that `sleep` advances: the wait's timing without real waiting."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def wait(release: ReleaseWait, timeout: float = 60.0, said: list[str] | None = None):
    clock = FakeClock()
    return release.wait(timeout, (said if said is not None else []).append, clock=clock, sleep=clock.sleep)


BOTH = [gpu(0, 70.5, [proc(FOREIGN, 10), proc(CONTAINER, 60)])]
FOREIGN_ONLY = [gpu(0, 10.5, [proc(FOREIGN, 10)])]


def test_a_foreign_process_holding_memory_does_not_hold_the_wait_up() -> None:
    """Regression: a foreign 10 GiB holder made every swap wait its whole timeout (> 5% used)."""
    probe = ScriptedProbe(BOTH, FOREIGN_ONLY)
    release = ReleaseWait.snapshot(probe, ("0",), frozenset({CONTAINER}))
    outcome = wait(release, timeout=20)
    assert release.accounting == "per-process"
    assert (outcome.how, outcome.note) == ("released", None)
    assert outcome.seconds < 1 and probe.calls == 2


def test_per_process_waits_while_a_stopped_process_is_still_listed() -> None:
    probe = ScriptedProbe(BOTH, BOTH, BOTH, FOREIGN_ONLY)
    said: list[str] = []
    outcome = wait(ReleaseWait.snapshot(probe, ("0",), frozenset({CONTAINER})), said=said)
    assert outcome.how == "released" and probe.calls == 4 and len(said) == 2
    assert outcome.seconds == pytest.approx(2 * gpu_release.INTERVAL)


def test_a_gpu_the_container_did_not_use_is_released_at_once() -> None:
    probe = ScriptedProbe(
        [gpu(0, 60.5, [proc(CONTAINER, 60)]), gpu(1, 10.5, [proc(FOREIGN, 10)])],
        [gpu(0, 0.5), gpu(1, 10.5, [proc(FOREIGN, 10)])],
    )
    outcome = wait(ReleaseWait.snapshot(probe, ("all",), frozenset({CONTAINER})))
    assert outcome.how == "released" and probe.calls == 2


def test_without_a_process_list_the_drop_against_the_snapshot_counts() -> None:
    """No per-process accounting (WSL2): released once used memory dropped and held steady."""
    probe = ScriptedProbe([gpu(0, 70.5)], [gpu(0, 70.5)], [gpu(0, 30)], [gpu(0, 10.5)], [gpu(0, 10.5)])
    release = ReleaseWait.snapshot(probe, ("0",), frozenset({CONTAINER}))
    outcome = wait(release)
    assert release.accounting == "snapshot drop"
    assert outcome.how == "released" and probe.calls == 5


def test_unseen_container_processes_fall_back_to_the_drop() -> None:
    """Processes listed under other PIDs (another PID namespace) do not count as released."""
    probe = ScriptedProbe([gpu(0, 60.5, [proc(1, 60)])], [gpu(0, 60.5)], [gpu(0, 0.5)], [gpu(0, 0.5)])
    outcome = wait(ReleaseWait.snapshot(probe, ("0",), frozenset({CONTAINER})))
    assert outcome.how == "released" and probe.calls == 4


def test_the_next_variants_budget_free_ends_the_wait() -> None:
    stuck = [gpu(0, 70.5, [proc(FOREIGN, 10), proc(CONTAINER, 60)])]
    probe = ScriptedProbe(stuck)
    release = ReleaseWait.snapshot(probe, ("0",), frozenset({CONTAINER}), lambda gpus: {0: 60 * GIB})
    outcome = wait(release)
    assert outcome.how == "budget-free" and probe.calls == 2
    assert outcome.note is not None and "not released yet on GPU 0" in outcome.note
    short = ReleaseWait.snapshot(
        ScriptedProbe(stuck), ("0",), frozenset({CONTAINER}), lambda g: {0: 80 * GIB}
    )
    assert wait(short, timeout=1).how == "timeout"


def test_gives_up_after_the_timeout_and_says_what_still_holds_memory() -> None:
    probe = ScriptedProbe(BOTH)
    release = ReleaseWait.snapshot(probe, ("0",), frozenset({CONTAINER}), lambda gpus: {0: 135 * GIB})
    outcome = wait(release, timeout=2)
    assert outcome.how == "timeout" and outcome.seconds == pytest.approx(2, abs=gpu_release.INTERVAL)
    assert outcome.note is not None and "not released after 2s" in outcome.note
    assert (
        "stopped processes still listed: 4242" in outcome.note and "of the 135.0 GiB needed" in outcome.note
    )
    drop = ReleaseWait.snapshot(ScriptedProbe([gpu(0, 70.5)]), ("0",))
    assert "70.5 GiB before the stop" in (wait(drop, timeout=1).note or "")


def test_only_the_stack_gpus_count() -> None:
    busy = [gpu(0, 0.5), gpu(1, 70.5, [proc(CONTAINER, 70)])]
    assert wait(ReleaseWait.snapshot(ScriptedProbe(busy), ("0",), frozenset({CONTAINER}))).how == "released"
    assert wait(ReleaseWait.snapshot(ScriptedProbe(busy), ("1",), frozenset({CONTAINER})), 1).how == "timeout"


def test_skipped_without_gpus_probe_or_visible_gpu() -> None:
    assert "skipped" in (wait(ReleaseWait.snapshot(ScriptedProbe(BOTH), None)).note or "")

    class Failing(ScriptedProbe):
        def gpus(self) -> list[GpuInfo]:
            raise GpuProbeError("NVML query failed: boom")

    failed = wait(ReleaseWait.snapshot(Failing(), ("0",)))
    assert failed.how == "skipped" and "boom" in (failed.note or "")
    assert wait(ReleaseWait.snapshot(ScriptedProbe([]), ("0",))).how == "skipped"
    later = ReleaseWait.snapshot(ScriptedProbe(BOTH), ("0",), frozenset({CONTAINER}))
    later.probe = Failing()
    assert wait(later).how == "skipped"


def test_before_stop_reads_the_container_pids_and_the_next_variants_budget(
    tmp_path: Path, monkeypatch
) -> None:
    stack = make_stack(tmp_path, environ={"GPU_DEVICES": "0"}, target_shards=[27 * GIB, 27 * GIB])
    asked: list[list[str]] = []

    def pids(ids):
        asked.append(list(ids))
        return frozenset({CONTAINER})

    monkeypatch.setattr("composer.probes.cgroups.container_pids", pids)

    budget = partial(release_budget, stack, stack.variant("mtp"))
    release = ReleaseWait.before_stop(stack, budget, "c" * 64, ScriptedProbe(BOTH))
    assert asked == [["c" * 64]] and release.pids == {CONTAINER}
    # TP 4: a quarter of 54 GiB + KV 7 GiB + 1.58 GiB activations (the figure doctor prints)
    assert release.budget == {0: int(13.5 * GIB) + 7 * GIB + 1_696_512_327}


def test_the_swap_takes_the_snapshot_before_it_stops_and_waits_after(monkeypatch) -> None:
    from types import SimpleNamespace

    from composer.swap import transaction
    from composer.swap.ops import Member
    from composer.swap.outcome import UpOptions, UpResult
    from composer.swap.plan import Bring, plan_swap

    order: list[str] = []

    class Recorded(ReleaseWait):
        def wait(self, timeout, waiting=gpu_release.quiet, clock=None, sleep=None):  # type: ignore[override]
            order.append(f"wait {timeout:.0f}")
            return gpu_release.ReleaseOutcome("budget-free", 0.1, "budget free")

    def snapshot(stack, budget, container_id, probe=None):
        order.append(f"snapshot {container_id}")
        return Recorded(None)

    class Started(Exception):
        pass

    def start(_ctx, _file, _service):
        order.append("start")
        raise Started

    container = SimpleNamespace(
        stop_and_remove=lambda grace: order.append("stop"), container=SimpleNamespace(id="previous-id")
    )
    monkeypatch.setattr("composer.swap.transaction.ReleaseWait.before_stop", snapshot)
    monkeypatch.setattr(transaction, "by_name", lambda ctx, name: container)
    monkeypatch.setattr(transaction, "compose_up", start)
    stack = SimpleNamespace(gpus=("0",), stop_grace_period=1, service="vllm")
    ctx = transaction.Context(stack, None, UpOptions(release_timeout=7))  # type: ignore[arg-type]
    result = UpResult("mtp", "started")
    previous = SimpleNamespace(
        variant="previous-variant", name="p-vllm-1", config_file="/s/p.yml", service="vllm"
    )
    plan = plan_swap(
        "mtp", "h", previous, False, bring=Bring(Member("mtp", "mtp", "p-vllm-1", "vllm", "m.yml"))
    )  # type: ignore[arg-type]
    assert plan.steps == ("stop", "release", "start", "gate")
    swap = transaction.DockerSwap(ctx, result, None, Path("run.yml"))
    with pytest.raises(Started):
        for op in plan.ops[:3]:
            swap.handlers()[type(op)](op)
    assert order == ["snapshot previous-id", "stop", "wait 7", "start"]
    assert result.notes == ["budget free"] and "release_wait" in result.timings
