"""The sleep standby planner: does keeping variants asleep fit the machine, and what then?

Per GPU, the awake variant's need plus the residue of each variant asleep beside it must
fit; the host must hold every sleeper's weights. `plan_standby` is the pure verdict,
`plan_for` gathers its inputs, `decide_standby` is the swap's choice before anything
stops: sleep, stop the serving variant instead (`stack.standby_fallback = "stop"`), or
refuse with the numbers. A standby's cost is given in GiB and, when known, tokens of KV.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from composer.capacity import figures, inputs, model
from composer.capacity.figures import gib
from composer.errors import PreflightFailed

if TYPE_CHECKING:
    from composer.probes.gpu import GpuProbe
    from composer.stack.model import Stack


@dataclass(frozen=True)
class Awake:
    """The variant that will serve, per GPU (None: unknown)."""

    name: str
    weights: int | None
    kv_cache: int | None
    activations: int


@dataclass(frozen=True)
class Sleeper:
    """A variant that will sleep: its weights per GPU (None: unknown)."""

    name: str
    weights: int | None


def standby_cost(name: str, residue: int, kv_bytes_per_token: int | None) -> str:
    """`standby of mtp costs 1.3 GiB of KV cache per GPU = 72,000 tokens` (rounded from 10,000)."""
    if not kv_bytes_per_token:
        return f"standby of {name} costs {gib(residue)} per GPU"
    n = residue // kv_bytes_per_token
    tokens = f"{round(n, -3):,}" if n >= 10_000 else f"{n:,}"
    return f"standby of {name} costs {gib(residue)} of KV cache per GPU = {tokens} tokens"


@dataclass(frozen=True)
class StandbyPlan:
    """The verdict, each standby's cost, what could not be checked, the figures (JSON-ready)."""

    fits: bool
    costs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: dict[str, object] = field(default_factory=dict)


def plan_standby(
    awake: Awake,
    sleepers: list[Sleeper],
    *,
    residue: int,
    tensor_parallel: int,
    gpu_memory: int | None,
    host_memory: int | None,
    kv_bytes_per_token: int | None = None,
    gpu_source: str = "",
    level: int = 1,
) -> StandbyPlan:
    """Check the GPU and host budgets with `sleepers` asleep next to `awake` (pure)."""
    need = figures.gpu_need(awake.weights, awake.kv_cache, awake.activations)
    held_gpu = residue * len(sleepers)  # CUDA context, graph pools and NCCL buffers stay
    held = figures.host_ram_for_sleepers(
        [figures.host_ram_of_sleeper(s.weights, tensor_parallel, level) for s in sleepers]
    )
    data: dict[str, object] = {
        "gpu_need_bytes": need,
        "sleep_residue_bytes": held_gpu,
        "gpu_memory_bytes": gpu_memory,
        "host_ram_for_sleepers_bytes": held,
        "host_memory_bytes": host_memory,
    }
    if not sleepers:
        return StandbyPlan(True, figures=data)
    costs = [standby_cost(s.name, residue, kv_bytes_per_token) for s in sleepers]
    problems: list[str] = []
    notes: list[str] = []
    if gpu_memory is None:
        notes.append("GPU memory unknown (no GPU probed, no stack.gpu_memory_bytes): GPU fit not checked")
    elif need is None:
        notes.append(
            f"{awake.name}'s weights or KV cache size unknown (set weights_bytes and kv_cache_memory): "
            "GPU fit not checked"
        )
    elif need + held_gpu > gpu_memory:
        problems.append(
            f"per GPU: {awake.name} needs {gib(awake.weights)} weights + "
            f"{gib(awake.kv_cache)} KV cache + {gib(awake.activations)} activations, "
            f"plus {len(sleepers)} x {gib(residue)} for {', '.join(s.name for s in sleepers)} "
            f"asleep = {gib(need + held_gpu)}, above the GPU's {gib(gpu_memory)}"
            + (f" ({gpu_source})" if gpu_source else "")
        )
    unknown = [s.name for s in sleepers if s.weights is None and level != 2]
    if unknown:
        names = ", ".join(unknown)
        notes.append(f"weights of {names} unknown (set weights_bytes): host RAM not checked")
    elif host_memory is None:
        notes.append("host memory unknown: host RAM not checked")
    elif held is not None and held > host_memory:
        problems.append(
            f"host RAM: {', '.join(s.name for s in sleepers)} asleep hold {gib(held)} of weights "
            f"({tensor_parallel} GPU(s) each), above the host's {gib(host_memory)}"
        )
    return StandbyPlan(not problems, costs, problems, notes, data)


def plan_for(
    stack: Stack, target: str, asleep_after: list[str], probe: GpuProbe | None = None
) -> StandbyPlan:
    """The verdict for `target` serving with `asleep_after` sleeping; its `figures` carry
    the target's per-GPU figures, on the probed GPU or `stack.gpu_memory_bytes`."""
    memory, source = inputs.gpu_memory(stack, probe)
    serving = model.variant_figures(stack, stack.variant(target), memory)
    awake = Awake(target, serving.weights.per_gpu, serving.kv_cache, serving.activations)
    sleepers = [Sleeper(n, model.variant_weights(stack, stack.variant(n)).per_gpu) for n in asleep_after]
    plan = plan_standby(
        awake,
        sleepers,
        residue=stack.sleep_residue,
        tensor_parallel=stack.tensor_parallel_size,
        gpu_memory=memory,
        host_memory=inputs.host_memory(),
        kv_bytes_per_token=inputs.kv_bytes_per_token(stack),
        gpu_source=source,
        level=stack.sleep_level,
    )
    line = f"{target} per GPU: {serving.line()}"
    if asleep_after:
        held = plan.figures.get("host_ram_for_sleepers_bytes")
        line += (
            f" + {len(asleep_after)} x {gib(stack.sleep_residue)} sleep residue ({', '.join(asleep_after)} "
            f"asleep); host RAM for sleepers {gib(held if isinstance(held, int) else None)}"
        )
    data = {
        "target": target,
        "per_gpu": serving.as_data(),
        "release_budget_bytes": serving.need,
        "asleep_after": list(asleep_after),
        **plan.figures,
        "gpu_memory_from": source or None,
        "fits": plan.fits,
        "line": line,
    }
    return replace(plan, figures=data)


def refusal(plan: StandbyPlan) -> PreflightFailed:
    """The error of a standby that does not fit, with the numbers and the ways out."""
    return PreflightFailed(
        "preflight: sleep standby does not fit: "
        + "; ".join(plan.problems)
        + '; fix: set standby = "stop" on a variant, set stack.standby_fallback = "stop", '
        "or lower kv_cache_memory"
    )


@dataclass(frozen=True)
class StandbyDecision:
    """What a swap does about standby: `stop_instead` the serving variant (the fallback,
    said in `fallback`) or not; `plan` is the verdict that holds."""

    plan: StandbyPlan
    stop_instead: bool = False
    fallback: str = ""


def decide_standby(
    stack: Stack,
    target: str,
    asleep_now: list[str],
    sleeping_next: str | None,
) -> StandbyDecision:
    """Before anything stops: does `target` fit with `asleep_now` and `sleeping_next` (the
    serving variant the plan puts to sleep) asleep? If not and `stack.standby_fallback` is
    `stop`, the serving variant is stopped instead when that fits; else PreflightFailed."""
    asleep = sorted({*asleep_now, *([sleeping_next] if sleeping_next else [])} - {target})
    fit = plan_for(stack, target, asleep)
    if fit.fits:
        return StandbyDecision(fit)
    if sleeping_next and stack.standby_fallback == "stop":
        without = plan_for(stack, target, sorted(set(asleep_now) - {target}))
        if without.fits:
            return StandbyDecision(
                without,
                stop_instead=True,
                fallback=(
                    f'{sleeping_next} is stopped instead of put to sleep (stack.standby_fallback = "stop"): '
                    "sleep standby does not fit: " + "; ".join(fit.problems)
                ),
            )
        fit = without
    raise refusal(fit)
