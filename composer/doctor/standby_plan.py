"""The standby memory planner (pure): does keeping variants asleep fit the machine?

Per GPU, the awake variant's weights share, its KV cache and its activations, plus the
residue each sleeping variant still holds (CUDA context, graph pools, NCCL buffers:
about 1.3 GiB per GPU measured), must fit the GPU's memory. The host must hold every
sleeping variant's weights (a level-1 sleep copies them to host RAM; level 2 drops them).
Level 2 with speculative decoding drops acceptance to 0 or crashes (a known vLLM bug):
the stack refuses it unless allowed. Each standby's cost is given in words, in GiB and,
when the KV bytes per token are known, in tokens of KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1 << 30


def gib(n: int) -> str:
    """Bytes as GiB with one decimal, e.g. `1.3 GiB`."""
    return f"{n / GIB:.1f} GiB"


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


def tokens_text(n: int) -> str:
    """A token count rounded for words: `72,000`."""
    return f"{round(n, -3):,}" if n >= 10_000 else f"{n:,}"


def standby_cost(name: str, residue: int, kv_bytes_per_token: int | None) -> str:
    """`standby of mtp costs 1.3 GiB of KV cache per GPU = 72,000 tokens`."""
    if not kv_bytes_per_token:
        return f"standby of {name} costs {gib(residue)} per GPU"
    tokens = tokens_text(residue // kv_bytes_per_token)
    return f"standby of {name} costs {gib(residue)} of KV cache per GPU = {tokens} tokens"


@dataclass(frozen=True)
class StandbyPlan:
    """The verdict, the cost of each standby in words, and what could not be checked."""

    fits: bool
    costs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


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
) -> StandbyPlan:
    """Check the GPU and host budgets with `sleepers` asleep next to `awake`.

    `kv_bytes_per_token` (per GPU) turns each cost into tokens; `gpu_source` says where
    `gpu_memory` came from (the GPU probe or the stack), shown with the numbers.
    """
    plan = StandbyPlan(fits=True)
    if not sleepers:
        return plan
    for sleeper in sleepers:
        plan.costs.append(standby_cost(sleeper.name, residue, kv_bytes_per_token))
    gpu_need_known = awake.weights is not None and awake.kv_cache is not None
    if gpu_memory is None:
        plan.notes.append(
            "GPU memory unknown (no GPU probed, no stack.gpu_memory_bytes): GPU fit not checked"
        )
    elif not gpu_need_known:
        plan.notes.append(
            f"{awake.name}'s weights or KV cache size unknown (set weights_bytes and kv_cache_memory): "
            "GPU fit not checked"
        )
    else:
        assert awake.weights is not None and awake.kv_cache is not None
        need = awake.weights + awake.kv_cache + awake.activations + residue * len(sleepers)
        if need > gpu_memory:
            plan.problems.append(
                f"per GPU: {awake.name} needs {gib(awake.weights)} weights + "
                f"{gib(awake.kv_cache)} KV cache + {gib(awake.activations)} activations, "
                f"plus {len(sleepers)} x {gib(residue)} for {', '.join(s.name for s in sleepers)} "
                f"asleep = {gib(need)}, above the GPU's {gib(gpu_memory)}"
                + (f" ({gpu_source})" if gpu_source else "")
            )
    unknown = [s.name for s in sleepers if s.weights is None]
    if unknown:
        names = ", ".join(unknown)
        plan.notes.append(f"weights of {names} unknown (set weights_bytes): host RAM not checked")
    elif host_memory is None:
        plan.notes.append("host memory unknown: host RAM not checked")
    else:
        held = sum(s.weights or 0 for s in sleepers) * tensor_parallel
        if held > host_memory:
            plan.problems.append(
                f"host RAM: {', '.join(s.name for s in sleepers)} asleep hold {gib(held)} of weights "
                f"({tensor_parallel} GPU(s) each), above the host's {gib(host_memory)}"
            )
    return StandbyPlan(not plan.problems, plan.costs, plan.problems, plan.notes)
