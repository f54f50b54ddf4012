"""Wait (bounded) until a stopped container's GPU memory is released, or the next variant fits.

`ReleaseWait.before_stop` takes the snapshot before the stop; `wait` polls after it. Per GPU
of the stack the wait ends when either holds:

- the memory the stopped container held is gone. With per-process accounting (NVML or
  nvidia-smi list the container's processes, found through their cgroup): none of them is
  listed on that GPU any more. Without it (WSL2, or processes not visible from here): the
  GPU's used memory dropped below the snapshot by at least `DROP_FLOOR` and held steady
  (within `STEADY`) between two polls.
- the next variant's release budget (weights + KV cache + activations on that GPU, the
  figure doctor prints; `budget` comes from `composer.capacity.release_budget`, so this
  module knows GPUs, not variants) is free; unused while a weight share is unknown.

Memory held by anything else does not hold the wait up. It always ends by `timeout` and
says how it ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from composer.engine import retry
from composer.engine.retry import Pending
from composer.errors import ComposerError
from composer.probes.gpu import GpuInfo, GpuProbe, select_gpus
from composer.signals import pause
from composer.swap.execute import Say, quiet

if TYPE_CHECKING:
    from composer.stack.model import Stack

INTERVAL = retry.GPU_RELEASE_INTERVAL_S
MIB = 1 << 20
DROP_FLOOR = 256 * MIB
STEADY = 64 * MIB
GIB = float(1 << 30)

PER_PROCESS = "per-process"
SNAPSHOT_DROP = "snapshot drop"
NO_GPUS = "no GPUs configured: GPU release wait skipped"


@dataclass(frozen=True)
class ReleaseOutcome:
    """How a release wait ended: `released`, `budget-free`, `timeout` or `skipped`."""

    how: str
    seconds: float
    detail: str = ""

    @property
    def note(self) -> str | None:
        """A line for the swap's notes; None when the memory was simply released."""
        return None if self.how == "released" else self.detail


class ReleaseWait:
    """A snapshot of the stack's GPUs taken before a stop, and the wait after it; `accounting`:
    `per-process` when a GPU listed a stopped process in the snapshot, else `snapshot drop`."""

    def __init__(
        self,
        probe: GpuProbe | None,
        before: tuple[GpuInfo, ...] = (),
        pids: frozenset[int] = frozenset(),
        budget: Mapping[int, int] | None = None,
        skipped: str = "",
        seen: tuple[GpuInfo, ...] | None = None,
    ) -> None:
        """`before`: the stack's GPUs before the stop; `seen`: every GPU then (default `before`)."""
        self.probe = probe
        self.before = before
        self.pids = pids
        self.budget = dict(budget) if budget is not None else None
        self.skipped = skipped
        listed = [p for g in (before if seen is None else seen) for p in g.processes if p.pid in pids]
        self.accounting = PER_PROCESS if listed else SNAPSHOT_DROP

    @classmethod
    def snapshot(
        cls,
        probe: GpuProbe,
        devices: tuple[str, ...] | None,
        pids: frozenset[int] = frozenset(),
        budget: Callable[[tuple[GpuInfo, ...]], Mapping[int, int] | None] | None = None,
    ) -> ReleaseWait:
        """Read the GPUs `devices` names now; `pids` are the processes about to be stopped."""
        if devices is None:
            return cls(None, skipped=NO_GPUS)
        if not probe.available:
            return cls(None, skipped=f"no GPU probe ({probe.reason}): GPU release wait skipped")
        try:
            found = probe.gpus()
        except ComposerError as err:
            return cls(None, skipped=f"GPU probe failed ({err}): GPU release wait skipped")
        before = tuple(select_gpus(found, devices))
        if not before:
            return cls(None, skipped="none of the stack's GPUs is visible: GPU release wait skipped")
        return cls(probe, before, pids, budget(before) if budget else None, seen=tuple(found))

    @classmethod
    def before_stop(
        cls,
        stack: Stack,
        budget: Callable[[tuple[GpuInfo, ...]], Mapping[int, int] | None] | None,
        container_id: str | None,
        probe: GpuProbe | None = None,
    ) -> ReleaseWait:
        """The snapshot a swap takes before stopping the container `container_id` (None: none
        runs); `budget`: the bytes per GPU index the next variant needs free (None: unknown),
        given the stack's GPUs."""
        from composer.probes.cgroups import container_pids
        from composer.probes.gpu import detect_probe

        pids = container_pids([container_id]) if container_id is not None else frozenset()
        return cls.snapshot(probe or detect_probe(), stack.gpus, pids, budget)

    def wait(
        self,
        timeout: float,
        waiting: Say = quiet,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = pause,
    ) -> ReleaseOutcome:
        """Poll until every GPU is released or has the budget free, or `timeout` passed."""
        began = clock()
        if self.probe is None:
            return ReleaseOutcome("skipped", 0.0, self.skipped)
        last: dict[int, int] = {}

        def attempt() -> ReleaseOutcome:
            try:
                now = {
                    g.index: g for g in select_gpus(self.probe.gpus(), [str(b.index) for b in self.before])
                }
            except ComposerError as err:
                return ReleaseOutcome("skipped", clock() - began, f"GPU probe failed ({err}): wait abandoned")
            released = {b.index for b in self.before if self._released(b, now.get(b.index), last)}
            fits = {b.index for b in self.before if self._fits(now.get(b.index))}
            last.clear()
            last.update({i: g.used_bytes for i, g in now.items()})
            elapsed = clock() - began
            pending = [b for b in self.before if b.index not in released]
            if not pending:
                return ReleaseOutcome("released", elapsed, f"released ({self.accounting}) in {elapsed:.1f}s")
            if all(b.index in fits for b in pending):
                gpus = ", ".join(str(b.index) for b in pending)
                return ReleaseOutcome(
                    "budget-free",
                    elapsed,
                    f"the next variant's memory budget is free after {elapsed:.1f}s "
                    f"(the stopped container's memory is not released yet on GPU {gpus})",
                )
            held = "; ".join(self._describe(b, now.get(b.index)) for b in pending)
            timed_out = ReleaseOutcome(
                "timeout", elapsed, f"GPU memory not released after {timeout:.0f}s ({held}); starting anyway"
            )
            raise Pending(f"waiting for the stopped container's GPU memory ({elapsed:.1f}s)", timed_out)

        try:
            return retry.gpu_release(timeout, clock=clock, sleep=sleep, on_wait=lambda p: waiting(str(p)))(
                attempt
            )
        except Pending as gave_up:
            if isinstance(gave_up.result, ReleaseOutcome):
                return gave_up.result
            raise

    def _released(self, before: GpuInfo, now: GpuInfo | None, last: Mapping[int, int]) -> bool:
        if now is None:
            return True  # the GPU is gone from the list: nothing to wait for on it
        if self.accounting == PER_PROCESS:
            return not any(p.pid in self.pids for p in now.processes)
        dropped = now.used_bytes <= before.used_bytes - DROP_FLOOR
        previous = last.get(now.index)
        return dropped and previous is not None and abs(now.used_bytes - previous) <= STEADY

    def _fits(self, now: GpuInfo | None) -> bool:
        if self.budget is None or now is None or now.index not in self.budget:
            return False
        return now.free_bytes >= self.budget[now.index]

    def _describe(self, before: GpuInfo, now: GpuInfo | None) -> str:
        if now is None:
            return f"GPU {before.index}: gone"
        text = f"GPU {now.index}: {now.used_bytes / GIB:.1f} GiB used"
        if self.accounting == PER_PROCESS:
            pids = sorted(p.pid for p in now.processes if p.pid in self.pids)
            text += ", stopped processes still listed: " + ", ".join(map(str, pids))
        else:
            text += f", {before.used_bytes / GIB:.1f} GiB before the stop"
        if self.budget is not None and now.index in self.budget:
            text += (
                f", {now.free_bytes / GIB:.1f} GiB free of the {self.budget[now.index] / GIB:.1f} GiB needed"
            )
        return text
