"""The benchmark on Docker: each point swapped in through the health-gated `up`, and
whatever served before the benchmark brought back afterwards (in a `finally`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from composer.bench.hints import variant_hints
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
from composer.render.spec import resolve_target
from composer.stack.model import Stack

if TYPE_CHECKING:
    import docker

    from composer.engine.containers import RunningVariant
    from composer.swap.swapper import UpOptions

StackFor = Callable[[tuple[str, ...]], Stack]


def config_hash(stack: Stack, variant: str) -> str:
    """The config hash a variant's container gets from this stack (pure)."""
    return resolve_target(stack, variant).hash


def stack_of(previous: RunningVariant, stack_for: StackFor, ks: Sequence[int]) -> Stack | None:
    """The stack (plain, or with one of the swept Ks) that reproduces what ran before."""
    candidates = [()] + [k_override(BenchPoint(previous.variant, "", k)) for k in ks]
    for flags in candidates:
        stack = stack_for(flags)
        if (
            previous.variant in stack.variants
            and config_hash(stack, previous.variant) == previous.config_hash
        ):
            return stack
    return None


def plan_with_hints(
    stack: Stack, variants: Sequence[str], ks: Sequence[int] | None
) -> tuple[list[BenchPoint], list[str], dict[BenchPoint, str]]:
    """The sweep (with each checkpoint's suggested K), the hints, and the points vLLM would reject."""
    suggested = {name: variant_hints(stack, stack.variant(name), ()).suggested_k for name in variants}
    points = plan_points(stack, variants, ks, suggested)
    messages: list[str] = []
    skip: dict[BenchPoint, str] = {}
    for name in dict.fromkeys(p.variant for p in points):
        hints = variant_hints(stack, stack.variant(name), [p.k for p in points if p.variant == name and p.k])
        messages += hints.messages
        rejected = dict(hints.rejected)
        skip.update({p: rejected[p.k] for p in points if p.variant == name and p.k in rejected})
    return points, messages, skip


def bench_with_swaps(
    stack_for: StackFor,
    variants: Sequence[str],
    ks: Sequence[int] | None,
    options: BenchOptions,
    *,
    client: docker.DockerClient,
    swap_timeout: float = 900.0,
    progress: Progress = lambda _: None,
) -> BenchReport:
    """Sweep the points, each swapped in with `up`; restore the previous variant at the end.

    `stack_for(flags)` loads the stack with extra `--set` flags (the CLI's `obj.stack`).
    """
    from composer.engine.containers import current_variant
    from composer.swap.swapper import UpOptions, up

    stack = stack_for(())
    points, hints, skip = plan_with_hints(stack, variants, ks)
    for hint in hints:
        progress(f"hint: {hint}")
    up_options = UpOptions(timeout=swap_timeout)
    previous = current_variant(stack, client)
    progress(f"serving before the benchmark: {previous.variant if previous else 'nothing'}")

    def serve(point: BenchPoint) -> None:
        point_stack = stack_for(k_override(point))
        target = resolve_target(point_stack, point.variant)
        result = up(point_stack, target, client=client, options=up_options, progress=progress)
        progress(f"{point.label}: {result.outcome}")

    notes: list[str] = []
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
    finally:
        notes = _restore(previous, stack_for, [p.k for p in points if p.k], client, up_options, progress)
    report.notes += notes
    return report


def _restore(
    previous: RunningVariant | None,
    stack_for: StackFor,
    ks: Sequence[int],
    client: docker.DockerClient,
    options: UpOptions,
    progress: Progress,
) -> list[str]:
    """Bring back what served before (or stop the benchmark's container); return notes."""
    from composer.swap.swapper import down, up

    stack = stack_for(())
    if previous is None:
        stopped = down(stack, client=client, progress=progress)
        progress(f"nothing served before the benchmark: stopped {stopped or 'nothing'}")
        return []
    matching = stack_of(previous, stack_for, ks)
    notes = []
    if matching is None:
        matching = stack
        notes.append(
            f"{previous.variant} ran with a configuration this stack does not produce "
            f"(hash {previous.config_hash}); it was restored with the stack's configuration"
        )
    progress(f"restoring {previous.variant}")
    up(
        matching,
        resolve_target(matching, previous.variant),
        client=client,
        options=options,
        progress=progress,
    )
    progress(f"{previous.variant} serves again")
    return notes
