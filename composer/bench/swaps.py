"""The benchmark on Docker: each point swapped in through the health-gated `up` (a failed
point is not rolled back: the next one replaces it), and what served before brought back
once at the end, Ctrl-C included (further Ctrl-Cs ignored while it loads). The report
carries its metadata: tool version, stack hash, image ids, time and the host's facts.

Hints for K from the checkpoints' config.json: a DFlash draft's `block_size` suggests
K = block_size - 1 and a larger K is skipped (`up` refuses it); the target's MTP layer count
says whether MTP is available, and vLLM rejects a K above it that is not a multiple of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain
from typing import TYPE_CHECKING

from composer.bench.sweep import (
    BenchOptions,
    BenchPoint,
    BenchReport,
    Progress,
    k_override,
    plan_points,
    run_bench,
)
from composer.engine.health import base_url
from composer.errors import CheckpointError
from composer.probes.checkpoints import dflash_block_size, mtp_layers, read_config
from composer.render.target import resolve_target
from composer.signals import interrupts_ignored
from composer.stack.model import Stack, Variant
from composer.stack.values import MTP_METHODS, V2_RUNNER_METHODS


@dataclass(frozen=True)
class KHints:
    """What the checkpoints say about K for one variant."""

    suggested_k: int | None
    messages: tuple[str, ...]
    rejected: tuple[tuple[int, str], ...] = ()


def variant_hints(stack: Stack, variant: Variant, ks: Iterable[int]) -> KHints:
    """Hints for one speculative variant and the Ks about to be measured."""
    spec = variant.speculative
    if spec is None:
        return KHints(None, ())
    name = variant.name
    messages: list[str] = []
    rejected: list[tuple[int, str]] = []
    suggested: int | None = None
    if spec.draft_model:
        try:
            block = dflash_block_size(read_config(stack.draft_dir))
        except CheckpointError as err:
            block = None
            messages.append(f"{name}: cannot read the draft's config: {err}")
        if block is not None and block > 1:
            suggested = block - 1
            messages.append(f"{name}: the draft was trained with block_size {block}: start at K={suggested}")
            if spec.method in V2_RUNNER_METHODS:  # the same rule as doctor's draft-k check
                for k in sorted(k for k in set(ks) if k > block - 1):
                    problem = f"K={k} exceeds the draft's trained block (block_size {block})"
                    messages.append(f"{name}: {problem}: up refuses it")
                    rejected.append((k, problem))
    if spec.method in MTP_METHODS:
        try:
            layers = mtp_layers(read_config(stack.model_dir))
        except CheckpointError as err:
            messages.append(f"{name}: cannot read the target's config: {err}")
        else:
            if layers == 0:
                messages.append(f"{name}: the target has no mtp_num_hidden_layers: MTP is not available")
            else:
                for k in sorted(k for k in set(ks) if k > layers and k % layers != 0):
                    problem = f"K={k} exceeds the {layers} MTP layer(s) and is not divisible by {layers}"
                    messages.append(f"{name}: {problem}: vLLM will reject it")
                    rejected.append((k, problem))
    return KHints(suggested, tuple(messages), tuple(rejected))


if TYPE_CHECKING:
    import docker

    from composer.engine.containers import RunningVariant
    from composer.swap.outcome import UpOptions

StackFor = Callable[[tuple[str, ...]], Stack]


def bench_with_swaps(
    stack_for: StackFor,
    variants: Sequence[str],
    ks: Sequence[int] | None,
    options: BenchOptions,
    *,
    client: docker.DockerClient,
    swap_timeout: float = 900.0,
    progress: Progress = lambda _: None,
    waiting: Progress | None = None,
    allow_weak_key: bool = False,
    ks_by_variant: Mapping[str, Sequence[int]] | None = None,
    after_sweep: Callable[[BenchReport], None] | None = None,
) -> BenchReport:
    """Sweep the points, each swapped in with `up`, then restore the previous variant.
    `stack_for(flags)` loads the stack with extra `--set` flags; `after_sweep` runs after an
    uninterrupted sweep, before the restore (`bench --decide`'s switching arm)."""
    from composer.swap.entry import up_set
    from composer.swap.outcome import UpOptions
    from composer.swap.snapshot import take

    stack = stack_for(())
    suggested = {name: variant_hints(stack, stack.variant(name), ()).suggested_k for name in variants}
    points = plan_points(stack, variants, ks, suggested, ks_by_variant)
    hints: list[str] = []
    skip: dict[BenchPoint, str] = {}  # the points vLLM would reject
    for name in dict.fromkeys(p.variant for p in points):
        found = variant_hints(stack, stack.variant(name), [p.k for p in points if p.variant == name and p.k])
        hints += found.messages
        rejected = dict(found.rejected)
        skip.update({p: rejected[p.k] for p in points if p.variant == name and p.k in rejected})
    for hint in hints:
        progress(f"hint: {hint}")
    up_options = UpOptions(timeout=swap_timeout, rollback=False, allow_weak_key=allow_weak_key)
    metadata = bench_metadata(stack, variants, client)
    previous = take(stack, client).current
    progress(f"serving before the benchmark: {previous.variant if previous else 'nothing'}")

    def serve(point: BenchPoint) -> None:
        point_stack = stack_for(k_override(point))
        result = up_set(
            point_stack,
            [point.variant],
            client=client,
            options=up_options,
            progress=progress,
            waiting=waiting,
        )
        progress(f"{point.label}: {result.outcome}")

    try:
        report = run_bench(
            points,
            options,
            serve=serve,
            base_url=base_url(stack.bind_address, stack.port),
            api_key=stack.api_key,
            served_name=stack.served_model_name,
            progress=progress,
            hints=hints,
            skip=skip,
        )
        if after_sweep is not None and not report.interrupted:
            after_sweep(report)
    finally:
        with interrupts_ignored():
            restore_options = UpOptions(timeout=swap_timeout, allow_weak_key=allow_weak_key)
            ks_swept = [p.k for p in points if p.k]
            notes = _restore(previous, stack_for, ks_swept, client, restore_options, progress, waiting)
    report.notes += notes
    metadata["finished_at"] = _now()
    report.metadata = metadata
    return report


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def stack_hash(stack: Stack) -> str:
    """A digest of every variant's config hash: which stack the results came from."""
    hashes = {name: resolve_target(stack, name).hash for name in sorted(stack.variants)}
    return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()[:16]


def bench_metadata(
    stack: Stack, variants: Sequence[str], client: docker.DockerClient | None
) -> dict[str, object]:
    """What a later comparison needs: tool, stack, images and machine (no host name, no user)."""
    from docker.errors import DockerException

    from composer import __version__
    from composer.errors import GpuProbeError
    from composer.probes.gpu import detect_probe

    images: dict[str, str | None] = {}
    for ref in sorted({stack.image(stack.variant(name).image_key) for name in variants}):
        try:
            images[ref] = client.images.get(ref).id if client is not None else None
        except DockerException:
            images[ref] = None
    host: dict[str, object] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        host["docker"] = client.version().get("Version") if client is not None else None
    except Exception:  # the version is a nicety
        host["docker"] = None
    probe = detect_probe()
    try:
        gpus = probe.gpus() if probe.available else []
    except GpuProbeError:
        gpus = []
    host["gpus"] = [{"name": g.name, "memory_bytes": g.total_bytes} for g in gpus]
    return {
        "tool_version": __version__,
        "stack_hash": stack_hash(stack),
        "config_hashes": {name: resolve_target(stack, name).hash for name in variants},
        "images": images,
        "started_at": _now(),
        "host": host,
    }


def _restore(
    previous: RunningVariant | None,
    stack_for: StackFor,
    ks: Sequence[int],
    client: docker.DockerClient,
    options: UpOptions,
    progress: Progress,
    waiting: Progress | None = None,
) -> list[str]:
    """Bring back what served before (or stop the benchmark's container); return notes."""
    from composer.swap.down import down
    from composer.swap.entry import up_set

    stack = stack_for(())
    if previous is None:
        stopped = down(stack, client=client, progress=progress).stopped
        progress(f"nothing served before the benchmark: stopped {', '.join(stopped) or 'nothing'}")
        return []
    matching = None  # the stack (plain, or with one of the swept Ks) that reproduces what ran before
    if previous.variant in stack.variants:
        swept = ks if stack.variant(previous.variant).speculative is not None else ()  # K: speculative only
        stacks = chain((stack,), (stack_for(k_override(BenchPoint(previous.variant, "", k))) for k in swept))
        matching = next(
            (s for s in stacks if resolve_target(s, previous.variant).hash == previous.config_hash), None
        )
    notes = []
    if matching is None:
        matching = stack
        notes.append(
            f"{previous.variant} ran with a configuration this stack does not produce "
            f"(hash {previous.config_hash}); it was restored with the stack's configuration"
        )
    progress(f"restoring {previous.variant}")
    up_set(matching, [previous.variant], client=client, options=options, progress=progress, waiting=waiting)
    progress(f"{previous.variant} serves again")
    return notes
