"""Doctor's sleep standby check: each variant serving with every other sleeper asleep.

The planner and its figures are `composer.capacity` (`plan_for`), the same that `up`
runs before anything stops (`decide_standby`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from composer.capacity.standby import plan_for
from composer.doctor.preflight import Finding

if TYPE_CHECKING:
    from composer.doctor.gpu_checks import GpuFacts
    from composer.probes.gpu import GpuInfo
    from composer.stack.model import Stack


@dataclass(frozen=True)
class FactsProbe:
    """The GPUs doctor already probed, offered to the capacity model as a probe."""

    facts: GpuFacts
    name: str = "the GPU probe"
    reason: str = ""

    @property
    def available(self) -> bool:
        return bool(self.facts.gpus)

    def gpus(self) -> list[GpuInfo]:
        return list(self.facts.gpus)


def check_standby(stack: Stack, facts: GpuFacts) -> Finding | None:
    """For each variant serving with every other sleep-standby variant asleep: does it fit?

    None when no variant has `standby = "sleep"`.
    """
    sleepers = [n for n, v in stack.variants.items() if v.standby == "sleep"]
    if not sleepers:
        return None
    probe = FactsProbe(facts)
    refused: list[str] = []
    costs: list[str] = []
    notes: list[str] = []
    for name in stack.variants:
        asleep = [s for s in sleepers if s != name]
        plan = plan_for(stack, name, asleep, probe)
        costs += [c for c in plan.costs if c not in costs]
        notes += [n for n in plan.notes if n not in notes]
        refused += [f"{name} serving with {', '.join(asleep)} asleep: {p}" for p in plan.problems]
    level = f"sleep level {stack.sleep_level}"
    if refused:
        stop = stack.standby_fallback == "stop"
        return Finding(
            "standby",
            "warn" if stop else "fail",
            f"sleep standby does not fit ({level}; "
            + "; ".join(costs)
            + "): "
            + "; ".join(refused)
            + ("; `up` stops the variant instead (standby_fallback = stop)" if stop else ""),
            'set standby = "stop" on a variant, lower kv_cache_memory, '
            'or set stack.standby_fallback = "stop"',
        )
    detail = f"sleep standby fits ({level}): " + "; ".join(costs)
    if notes:
        return Finding(
            "standby", "warn", detail + "; " + "; ".join(notes), "set weights_bytes and kv_cache_memory"
        )
    return Finding("standby", "ok", detail)
