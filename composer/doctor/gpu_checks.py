"""GPU checks: count against TP, compute capability against the attention backend, memory,
and sleep standby (each variant serving with every other sleeper asleep, planned by
`composer.capacity`, as `up` plans it). Without GPU facts each says so (`not_available`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from composer.capacity import model as capacity
from composer.capacity.figures import gib
from composer.capacity.model import variant_weights
from composer.capacity.standby import plan_for
from composer.doctor.preflight import STATUSES, Finding, VariantFacts
from composer.errors import GpuProbeError
from composer.probes.gpu import GpuInfo, GpuProbe, select_gpus
from composer.stack.model import Stack, Variant
from composer.stack.values import V2_RUNNER_METHODS

FA_VERSION_VAR = "VLLM_FLASH_ATTN_VERSION"
NON_CAUSAL_BACKENDS = frozenset({"FLASH_ATTN", "FLEX_ATTENTION"})
DEMO_ONLY = "no GPU: demo only (GPU_DEVICES=none)"


@dataclass(frozen=True)
class GpuFacts:
    """The stack's GPUs as the probe sees them, or why there are none."""

    gpus: tuple[GpuInfo, ...] = ()
    all_gpus: tuple[GpuInfo, ...] = ()
    unavailable: str = ""
    demo: bool = False


def gather_gpu_facts(stack: Stack, probe: GpuProbe) -> GpuFacts:
    """One probe snapshot, narrowed to the stack's device list."""
    if stack.gpus is None:
        return GpuFacts(demo=True, unavailable=DEMO_ONLY)
    if not probe.available:
        return GpuFacts(unavailable=probe.reason or "no GPU probe")
    try:
        found = probe.gpus()
    except GpuProbeError as err:
        return GpuFacts(unavailable=str(err))
    if not found:
        return GpuFacts(unavailable=f"{probe.name} reports no GPUs")
    selected = tuple(select_gpus(found, stack.gpus))
    if not selected:
        host = ", ".join(str(g.index) for g in found)
        return GpuFacts((), tuple(found), f"none of GPU_DEVICES is among the host's GPUs ({host})")
    return GpuFacts(selected, tuple(found))


def not_available(name: str, facts: GpuFacts) -> Finding:
    """The finding of a GPU check that has no facts to look at."""
    if facts.demo:
        return Finding(name, "ok", DEMO_ONLY)
    return Finding(
        name,
        "warn",
        f"GPU facts not available: {facts.unavailable}",
        "install the NVIDIA driver (nvidia-smi) or `pip install nvidia-ml-py`; "
        "for a demo without GPUs set GPU_DEVICES=none",
    )


def check_gpu_count(stack: Stack, facts: GpuFacts) -> Finding:
    """Enough GPUs for tensor parallelism, and every listed device exists."""
    found = partial(Finding, "gpu-count")
    tp = stack.tensor_parallel_size
    listed = stack.gpus if stack.gpus not in (None, ("all",)) else None
    if listed is not None and len(listed) < tp:
        return found(
            "fail",
            f"GPU_DEVICES lists {len(listed)} GPU(s) but tensor_parallel_size is {tp}",
            f"list {tp} devices in GPU_DEVICES or lower TENSOR_PARALLEL_SIZE",
        )
    if not facts.all_gpus:
        return not_available("gpu-count", facts)
    if listed is not None and len(facts.gpus) < len(listed):
        seen = {str(g.index) for g in facts.gpus} | {g.uuid for g in facts.gpus}
        missing = [d for d in listed if d not in seen]
        return found(
            "fail",
            f"GPU_DEVICES names {', '.join(missing)} but the host has GPUs "
            + ", ".join(str(g.index) for g in facts.all_gpus),
            "set GPU_DEVICES to existing device indices",
        )
    if len(facts.gpus) < tp:
        return found(
            "fail",
            f"{len(facts.gpus)} GPU(s) visible, tensor_parallel_size is {tp}",
            f"lower TENSOR_PARALLEL_SIZE to {len(facts.gpus)} or add GPUs",
        )
    summary = _describe(facts.gpus)
    if listed is not None and len(listed) > tp:
        return found(
            "warn",
            f"{len(listed)} GPUs given to the container, TP uses {tp}: {summary}",
            f"list only {tp} devices in GPU_DEVICES so the others stay free",
        )
    return found("ok", f"{len(facts.gpus)} GPU(s) for TP={tp}: {summary}")


def check_attention_backend(stack: Stack, variant: VariantFacts) -> Finding | None:
    """DFlash drafters need a non-causal backend (FLASH_ATTN or FLEX_ATTENTION), set explicitly."""
    spec = variant.speculative
    if spec is None or spec.method not in V2_RUNNER_METHODS:
        return None
    backend = (spec.attention_backend or stack.attention_backend).upper()
    if backend not in NON_CAUSAL_BACKENDS:
        return Finding(
            "attention-backend",
            "fail",
            f"method {spec.method} with attention backend {backend.lower()}: it has no non-causal "
            "support, which DFlash requires",
            f'set attention_backend = "flash_attn" in [{variant.table}.speculative]',
        )
    if spec.attention_backend is None:
        return Finding(
            "attention-backend",
            "warn",
            f"the drafter inherits {backend.lower()} from the stack; set it explicitly",
            f'set attention_backend = "{backend.lower()}" in [{variant.table}.speculative]',
        )
    return Finding("attention-backend", "ok", f"drafter uses {backend.lower()} (non-causal support)")


def check_compute_capability(stack: Stack, variant: VariantFacts, facts: GpuFacts) -> Finding:
    """FA3 (VLLM_FLASH_ATTN_VERSION=3) needs Hopper (SM 9.x); FLASH_ATTN needs SM 8.0+."""
    found = partial(Finding, "compute-capability")
    if facts.unavailable:
        return not_available("compute-capability", facts)
    env = variant.environment
    backends = {stack.attention_backend.upper()}
    if variant.speculative and variant.speculative.attention_backend:
        backends.add(variant.speculative.attention_backend.upper())
    summary = _describe(facts.gpus)
    if env.get(FA_VERSION_VAR) == "3":
        not_hopper = [g for g in facts.gpus if g.compute_capability[0] != 9]
        if not_hopper:
            return found(
                "fail",
                f"{FA_VERSION_VAR}=3 forces FA3, which is Hopper-only (SM 9.x); "
                f"GPU {not_hopper[0].index} is {not_hopper[0].name} {not_hopper[0].sm}",
                f"remove {FA_VERSION_VAR} from [{variant.table}.env]: flash_attn uses FA2 there",
            )
    if "FLASH_ATTN" in backends:
        old = [g for g in facts.gpus if g.compute_capability < (8, 0)]
        if old:
            return found(
                "fail",
                f"flash_attn needs SM 8.0 or newer; GPU {old[0].index} is {old[0].name} {old[0].sm}",
                "set attention_backend to triton_attn (flex_attention for DFlash drafters)",
            )
    if len({g.compute_capability for g in facts.gpus}) > 1:
        return found(
            "warn",
            f"mixed compute capabilities under one TP group: {summary}",
            "use identical GPUs in GPU_DEVICES",
        )
    hopper = facts.gpus[0].compute_capability[0] == 9
    fa = " (FA3)" if hopper else " (FA2)" if "FLASH_ATTN" in backends else ""
    using = ", ".join(sorted(b.lower() for b in backends)) + fa
    return found("ok", f"{summary}: {using}")


def check_gpu_memory(stack: Stack, variant: Variant, facts: GpuFacts) -> Finding:
    """Free memory per GPU covers the weights share (target + drafter) and the KV budget. A
    weight share that cannot be read warns that it cannot tell (it still fails when the known
    parts alone do not fit)."""
    found = partial(Finding, "gpu-memory")
    if facts.unavailable:
        return not_available("gpu-memory", facts)
    weights = variant_weights(stack, variant)
    rated: list[tuple[str, GpuInfo, capacity.VariantFigures]] = []
    for gpu in facts.gpus:
        need = capacity.variant_figures(stack, variant, gpu.total_bytes, weights)
        size = need.known_need
        status = "fail" if size > gpu.total_bytes else "warn" if size > gpu.free_bytes else "ok"
        rated.append((status, gpu, need))
    status, gpu, need = max(rated, key=lambda r: STATUSES.index(r[0]))  # the first of the worst
    parts, unknown = weights.parts, weights.unknown
    if weights.configured is not None:
        parts, unknown = (("weights (weights_bytes)", weights.configured),), ()
    kv_text = gib(need.kv_cache) if need.kv_cache is not None else "? (gpu-memory-utilization)"
    breakdown = " + ".join(f"{gib(b)} {label}" for label, b in parts)
    breakdown += f" + {kv_text} KV + {gib(need.activations)} activations"
    total = gib(need.need) if need.need is not None else f"at least {gib(need.known_need)}"
    detail = f"needs {breakdown} = {total} per GPU; GPU {gpu.index} has {gib(gpu.free_bytes)} free"
    detail += f" of {gib(gpu.total_bytes)}"
    if status == "fail":
        return found(
            "fail",
            detail + "".join(f"; {n}" for n in unknown),
            f"lower KV_CACHE_MEMORY for {variant.name} or raise TENSOR_PARALLEL_SIZE",
        )
    if status == "ok" and unknown:
        return found(
            "warn",
            "cannot tell whether it fits: " + "; ".join(unknown) + f"; {detail}",
            "put the checkpoint (*.safetensors) in MODEL_DIR (and the drafter in DRAFT_DIR) "
            "so doctor can read the weight sizes",
        )
    if status == "ok":
        return found("ok", detail)
    holders = ", ".join(
        f"{p.name} (pid {p.pid}" + (f", {gib(p.used_bytes)})" if p.used_bytes is not None else ")")
        for p in gpu.processes
    )
    return found(
        "warn",
        detail
        + "".join(f"; {n}" for n in unknown)
        + (f"; held by {holders}" if holders else "; holders unknown"),
        "stop the processes holding GPU memory (a running variant is swapped out by `compose-spec up`) "
        f"or lower KV_CACHE_MEMORY for {variant.name}",
    )


def _describe(gpus: tuple[GpuInfo, ...]) -> str:
    kinds: dict[tuple[str, str], list[str]] = {}
    for gpu in gpus:
        kinds.setdefault((gpu.name, gpu.sm), []).append(str(gpu.index))
    return "; ".join(f"GPU {','.join(idx)} {name} {sm}" for (name, sm), idx in kinds.items())


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
    """Each variant serving with every other sleep-standby variant asleep: does it fit? (None
    when no variant has `standby = "sleep"`.)"""
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
