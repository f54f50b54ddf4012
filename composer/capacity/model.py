"""A stack's capacity figures: per variant and GPU, and for the host.

`variant_figures` is the one place a variant's settings become figures on one GPU; doctor,
the standby planner and the swap's GPU release wait all call it (a test patches it and
sees each of them change).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from composer.capacity import figures, inputs
from composer.capacity.figures import gib
from composer.probes.checkpoints import positive_int

if TYPE_CHECKING:
    from composer.probes.gpu import GpuInfo, GpuProbe
    from composer.stack.model import Stack, Variant


@dataclass(frozen=True)
class Weights:
    """A variant's weights per GPU, part by part (target, then drafter) as read."""

    parts: tuple[tuple[str, int | None], ...]
    unknown: tuple[str, ...] = ()
    configured: int | None = None  # the variant's weights_bytes: wins over the parts

    @property
    def per_gpu(self) -> int | None:
        """The weights per GPU (None while a part is unknown and none is configured)."""
        return None if self.unknown and self.configured is None else self.known

    @property
    def known(self) -> int:
        """The known parts: a lower bound while something is unknown."""
        return self.configured if self.configured is not None else sum(b or 0 for _, b in self.parts)


def draft_tensor_parallel_size(stack: Stack, variant: Variant) -> int:
    """`draft_tensor_parallel_size` from the speculative extra, else the stack's TP."""
    extra = dict(variant.speculative.extra) if variant.speculative else {}
    return positive_int(extra.get("draft_tensor_parallel_size")) or stack.tensor_parallel_size


def variant_weights(stack: Stack, variant: Variant) -> Weights:
    """Per-GPU weight shares (target under TP, drafter under its TP) and what is unknown."""
    tp = stack.tensor_parallel_size
    target, why = inputs.checkpoint_bytes(stack.model_dir)
    share = figures.weights_per_gpu(target, tp)
    parts: list[tuple[str, int | None]] = [("weights", share)]
    unknown = [] if share is not None else [f"target weights unknown ({why})"]
    spec = variant.speculative
    if spec is not None and spec.draft_model:
        draft_tp = draft_tensor_parallel_size(stack, variant)
        draft, why = inputs.checkpoint_bytes(stack.draft_dir)
        draft_share = figures.weights_per_gpu(draft, draft_tp)
        parts.append((f"draft weights (TP {draft_tp})", draft_share))
        if draft_share is None:
            unknown.append(f"draft weights unknown ({why})")
    return Weights(tuple(parts), tuple(unknown), variant.weights_bytes)


def memory_utilization(variant: Variant) -> float:
    """The variant's `--gpu-memory-utilization` from its extra args, else vLLM's default."""
    args = list(variant.extra_args)
    for i, arg in enumerate(args):
        if arg.startswith("--gpu-memory-utilization"):
            value = arg.partition("=")[2] or (args[i + 1] if i + 1 < len(args) else "")
            try:
                return float(value)
            except ValueError:
                break
    return figures.DEFAULT_GPU_MEMORY_UTILIZATION


@dataclass(frozen=True)
class VariantFigures:
    """One variant on one GPU: weights, KV cache, activations, and what it needs free."""

    variant: str
    weights: Weights
    kv_cache: int | None
    kv_source: str  # "kv_cache_memory" or "gpu-memory-utilization 0.92"
    activations: int
    gpu_total: int | None
    utilization: float | None = None  # set when the KV cache is what this fraction leaves

    @property
    def need(self) -> int | None:
        """Bytes the GPU must hold for it (the release budget); None while a part is unknown."""
        return figures.gpu_need(self.weights.per_gpu, self.kv_cache, self.activations)

    @property
    def known_need(self) -> int:
        """The known parts of `need`: a lower bound while something is unknown (under
        `--gpu-memory-utilization` at least that fraction of the GPU)."""
        known = self.weights.known + (self.kv_cache or 0) + self.activations
        if self.utilization is not None and self.gpu_total is not None:
            return max(known, int(self.gpu_total * self.utilization))
        return known

    def line(self) -> str:
        """`13.5 GiB weights + 7.0 GiB KV cache (kv_cache_memory) + 1.6 GiB activations = 22.1 GiB`."""
        return (
            f"{gib(self.weights.per_gpu)} weights + {gib(self.kv_cache)} KV cache ({self.kv_source}) + "
            f"{gib(self.activations)} activations = {gib(self.need)}"
        )

    def as_data(self) -> dict[str, object]:
        return {
            "weights_bytes": self.weights.per_gpu,
            "kv_cache_bytes": self.kv_cache,
            "kv_cache_from": self.kv_source,
            "activations_bytes": self.activations,
            "need_bytes": self.need,
        }


def variant_figures(
    stack: Stack, variant: Variant, gpu_total: int | None, weights: Weights | None = None
) -> VariantFigures:
    """`variant`'s figures on a GPU of `gpu_total` bytes (None: unknown); `weights` saves a
    second read of the checkpoints."""
    weights = weights if weights is not None else variant_weights(stack, variant)
    utilization = memory_utilization(variant)
    configured = variant.kv_cache_memory
    kv = figures.kv_cache_per_gpu(
        configured, gpu_total, utilization, weights.per_gpu, figures.ACTIVATIONS_PER_GPU
    )
    return VariantFigures(
        variant.name,
        weights,
        kv,
        "kv_cache_memory" if configured is not None else f"gpu-memory-utilization {utilization}",
        figures.ACTIVATIONS_PER_GPU,
        gpu_total,
        None if configured is not None else utilization,
    )


def release_budget(stack: Stack, variant: Variant, gpus: tuple[GpuInfo, ...]) -> dict[int, int] | None:
    """Bytes per GPU index that must be free before `variant` starts, or None while unknown."""
    weights = variant_weights(stack, variant)
    needs = {g.index: variant_figures(stack, variant, g.total_bytes, weights).need for g in gpus}
    budget = {i: n for i, n in needs.items() if n is not None}
    return budget if len(budget) == len(needs) else None


@dataclass(frozen=True)
class Capacity:
    """Every figure of a stack on its smallest GPU and its host (doctor prints it)."""

    gpu_memory: int | None
    gpu_source: str
    variants: dict[str, VariantFigures]
    residue: dict[str, int]  # per GPU, held by each sleep-standby variant while asleep
    host_ram: dict[str, int | None]  # held by each sleep-standby variant while asleep
    host_memory: int | None
    sleep_level: int

    @property
    def host_ram_for_sleepers(self) -> int | None:
        """The host RAM the sleep-standby variants hold when all of them sleep."""
        return figures.host_ram_for_sleepers(list(self.host_ram.values()))

    def as_data(self) -> dict[str, object]:
        """JSON-ready figures in bytes (None: unknown)."""
        return {
            "gpu_memory_bytes": self.gpu_memory,
            "gpu_memory_from": self.gpu_source or None,
            "per_gpu": {
                name: {**f.as_data(), "sleep_residue_bytes": self.residue.get(name, 0)}
                for name, f in self.variants.items()
            },
            "release_budget_bytes": {name: f.need for name, f in self.variants.items()},
            "host_ram_for_sleepers_bytes": {**self.host_ram, "total": self.host_ram_for_sleepers},
            "host_memory_bytes": self.host_memory,
            "sleep_level": self.sleep_level,
        }

    def lines(self) -> list[str]:
        """The figures as text, one line per variant, then the host."""
        where = " (GPU memory unknown)"
        if self.gpu_memory:
            where = f" of {gib(self.gpu_memory)} ({self.gpu_source})"
        out = [f"capacity per GPU{where}:"]
        for name, f in self.variants.items():
            residue = self.residue.get(name)
            out.append(
                f"  {name}: {f.line()} (release budget)"
                + (f"; {gib(residue)} sleep residue while asleep" if residue else "")
            )
        if self.host_ram:
            each = ", ".join(f"{n} {gib(b)}" for n, b in self.host_ram.items())
            host = f" of the host's {gib(self.host_memory)}" if self.host_memory else ""
            total = gib(self.host_ram_for_sleepers)
            out.append(f"  host RAM for sleepers (level {self.sleep_level}): {each} = {total}{host}")
        else:
            out.append("  host RAM for sleepers: none (no variant has standby = sleep)")
        return out


def capacity_of(stack: Stack, probe: GpuProbe | None = None, names: list[str] | None = None) -> Capacity:
    """The figures of `names` (default every variant) on the stack's smallest GPU; the host
    RAM and the residue of every sleep-standby variant (they sleep beside any of `names`)."""
    memory, source = inputs.gpu_memory(stack, probe)
    chosen = names if names is not None else list(stack.variants)
    per_variant = {n: variant_figures(stack, stack.variant(n), memory) for n in chosen}
    sleepers = [n for n, v in stack.variants.items() if v.standby == "sleep"]
    return Capacity(
        memory,
        source,
        per_variant,
        dict.fromkeys(sleepers, stack.sleep_residue),
        {n: host_ram_asleep(stack, n) for n in sleepers},
        inputs.host_memory(),
        stack.sleep_level,
    )


def host_ram_asleep(stack: Stack, name: str) -> int | None:
    """The host RAM variant `name` holds while asleep (None: unknown, or not in the stack)."""
    if name not in stack.variants:
        return None
    weights = variant_weights(stack, stack.variants[name]).per_gpu
    return figures.host_ram_of_sleeper(weights, stack.tensor_parallel_size, stack.sleep_level)
