"""The sleep standby planner's inputs and verdict, and doctor's standby check.

`plan_for` gathers what the pure planner (`standby_plan`) needs: the serving variant's
weights (`weights_bytes`, else the checkpoint's safetensors headers), its KV cache and
activations, the GPU's memory (the GPU probe, else `stack.gpu_memory_bytes`), the host's
RAM and the KV bytes per token (config.json). `up` runs it before anything stops;
`check_standby` runs it for each variant serving while every other one sleeps.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from composer.doctor.preflight import Finding
from composer.doctor.standby_plan import Awake, Sleeper, StandbyPlan, plan_standby
from composer.errors import ComposerError, GpuProbeError, PreflightFailed

if TYPE_CHECKING:
    from composer.doctor.gpu_checks import GpuFacts
    from composer.probes.gpu import GpuInfo, GpuProbe
    from composer.render.target import Target
    from composer.stack.model import Stack, Variant

ACTIVATIONS_PER_GPU = 1_696_512_327  # 1.58 GiB: non-KV runtime memory (an estimate)


def host_memory() -> int | None:
    """The host's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def weights_per_gpu(stack: Stack, variant: Variant) -> int | None:
    """A variant's weights per GPU: `weights_bytes`, else estimated from the checkpoint's
    safetensors headers (model plus draft, split over the GPUs); None when unknown."""
    if variant.weights_bytes is not None:
        return variant.weights_bytes
    from composer.probes.checkpoints import weights_bytes

    dirs = [stack.model_dir]
    if variant.speculative is not None and variant.speculative.draft_model:
        dirs.append(stack.draft_dir)
    try:
        sizes = [weights_bytes(d) for d in dirs]
    except (ComposerError, OSError, ValueError):  # unreadable checkpoint: unknown, the planner says so
        return None
    if any(size is None for size in sizes):
        return None
    return sum(size or 0 for size in sizes) // stack.tensor_parallel_size


def gpu_memory(stack: Stack, probe: GpuProbe | None = None) -> tuple[int | None, str]:
    """Memory of the stack's smallest GPU and where it came from: the GPU probe when it sees
    the stack's GPUs, else `stack.gpu_memory_bytes` (None: unknown)."""
    from composer.probes.gpu import detect_probe, select_gpus

    if stack.gpus is not None:
        probe = probe if probe is not None else detect_probe()
        if probe.available:
            try:
                gpus = select_gpus(probe.gpus(), stack.gpus)
            except GpuProbeError:
                gpus = []
            if gpus:
                return min(g.total_bytes for g in gpus), f"probed by {probe.name}"
    if stack.gpu_memory_bytes is not None:
        return stack.gpu_memory_bytes, "stack.gpu_memory_bytes"
    return None, ""


def kv_bytes_per_token(stack: Stack) -> int | None:
    """KV cache bytes per token per GPU, from the checkpoint's config.json (None: unknown)."""
    from composer.probes.checkpoints import kv_bytes_per_token as model_bytes
    from composer.probes.checkpoints import read_config

    try:
        total = model_bytes(read_config(stack.model_dir))
    except ComposerError:
        return None
    return total // stack.tensor_parallel_size if total else None


def plan_for(
    stack: Stack, target: Target, asleep_after: list[str], probe: GpuProbe | None = None
) -> StandbyPlan:
    """The planner's verdict for `target` serving with `asleep_after` sleeping.

    GPU memory comes from the GPU probe when available, else from `stack.gpu_memory_bytes`.
    At sleep level 2 a sleeper holds no weights in host RAM (they are dropped).
    """
    variant = target.variant
    weights = weights_per_gpu(stack, variant)
    awake = Awake(variant.name, weights, variant.kv_cache_memory, ACTIVATIONS_PER_GPU)
    sleepers = [
        Sleeper(n, 0 if stack.sleep_level == 2 else weights_per_gpu(stack, stack.variant(n)))
        for n in asleep_after
    ]
    memory, source = gpu_memory(stack, probe)
    return plan_standby(
        awake,
        sleepers,
        residue=stack.sleep_residue,
        tensor_parallel=stack.tensor_parallel_size,
        gpu_memory=memory,
        host_memory=host_memory(),
        kv_bytes_per_token=kv_bytes_per_token(stack),
        gpu_source=source,
    )


def refusal(plan: StandbyPlan) -> PreflightFailed:
    """The error of a standby that does not fit, with the numbers and the ways out."""
    return PreflightFailed(
        "preflight: sleep standby does not fit: "
        + "; ".join(plan.problems)
        + '; fix: set standby = "stop" on a variant, set stack.standby_fallback = "stop", '
        "or lower kv_cache_memory"
    )


@dataclass(frozen=True)
class FactsProbe:
    """The GPUs doctor already probed, offered to the planner as a probe."""

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
    from composer.render.target import resolve_target

    sleepers = [n for n, v in stack.variants.items() if v.standby == "sleep"]
    if not sleepers:
        return None
    probe = FactsProbe(facts)
    refused: list[str] = []
    costs: list[str] = []
    notes: list[str] = []
    for name in stack.variants:
        asleep = [s for s in sleepers if s != name]
        plan = plan_for(stack, resolve_target(stack, name), asleep, probe)
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
