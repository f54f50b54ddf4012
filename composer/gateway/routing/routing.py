"""Which live upstream serves a request: the pure decision (no I/O, no clock).

Inputs: the upstreams as views (name, variant, ready, outstanding), the variant an alias
names (or None), the request's estimated prompt tokens (or None: not a completion, or the
body was not read) and the workload classes (`policy.WorkloadClass`, `GATEWAY_WORKLOADS`).

1. No ready upstream: None (the gate holds the request).
2. An alias whose variant has a ready replica: that variant (reason `alias`).
3. A prompt size and classes: the classes of the bucket that holds the prompt (the nearest
   bucket when none does; then the nearest measured length), in ascending concurrency. The
   first whose variant has a ready replica with fewer outstanding requests than the class's
   crossover wins (reason `class`, or `crossover` when a lower class was skipped because its
   variant was at its crossover; `fallback` when a lower class's variant had no ready
   replica). The crossover is the class's CROSSOVER field, else `crossover()`'s geometric
   mean. When every class's variant is past its crossover, the last class with a ready
   replica wins (`crossover`).
4. Otherwise (no size, no classes, or no class's variant is ready): the least loaded ready
   upstream of all (reason `balance`, or `fallback` when classes named only variants with
   no ready replica).
5. Spill (`spill` > 0, `GATEWAY_SPILL`): a request that steps 3-4 sent to a variant goes
   instead to the least loaded ready upstream of another variant when that one has at least
   `spill` fewer outstanding requests than the chosen one has of its own (reason `spill`),
   and only while its outstanding requests, that one included, stay below the lowest
   crossover of the classes naming its variant (`capacity`; no bound when none does). An
   alias is never spilled; spilled requests (`spilled`) count neither against their new
   upstream's classes' crossover nor as its own load (docs/gateway.md says why).
Among replicas of the chosen variant: least outstanding requests, ties to the one that has
served fewest (round robin at concurrency 1), then to the first listed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from composer.gateway.routing.policy import WorkloadClass, _bucket_gap, _log_gap

REASONS = ("alias", "class", "crossover", "fallback", "balance", "spill")


@dataclass(frozen=True)
class View:
    """What the decision needs to know of one upstream."""

    name: str
    variant: str
    ready: bool
    outstanding: int
    served: int = 0
    spilled: int = 0


@dataclass(frozen=True)
class Choice:
    """The upstream chosen and why (one of `REASONS`)."""

    name: str
    variant: str
    reason: str


def bucket_classes(classes: Sequence[WorkloadClass], prompt_tokens: float) -> list[WorkloadClass]:
    """The classes of the bucket nearest the prompt size (nearest measured length among
    them), in ascending concurrency."""
    if not classes:
        return []

    def fit(c: WorkloadClass) -> tuple[float, float]:
        length = _log_gap(c.tokens, prompt_tokens) if c.tokens else 0.0
        return (round(_bucket_gap(c, prompt_tokens), 9), round(length, 9))

    best = min(fit(c) for c in classes)
    return sorted((c for c in classes if fit(c) == best), key=lambda c: c.streams)


def crossover(ordered: Sequence[WorkloadClass], index: int) -> float:
    """Outstanding requests on one replica from which class `ordered[index]` yields."""
    here = ordered[index]
    if here.crossover:
        return float(here.crossover)
    for later in ordered[index + 1 :]:
        if later.variant != here.variant:
            return float(max(1, math.ceil(math.sqrt(here.streams * later.streams))))
    return math.inf


def capacity(classes: Sequence[WorkloadClass], variant: str) -> float:
    """Outstanding requests from which `variant` yields in any bucket (its lowest finite
    crossover; inf when none): the bound of what spills onto it."""
    found = math.inf
    buckets: dict[tuple[int, int | None], list[WorkloadClass]] = {}
    for c in classes:
        buckets.setdefault((c.min_tokens, c.max_tokens), []).append(c)
    for members in buckets.values():
        ordered = sorted(members, key=lambda c: c.streams)
        for i, c in enumerate(ordered):
            if c.variant == variant:
                found = min(found, crossover(ordered, i))
    return found


def _least(views: Sequence[View]) -> View | None:
    return min(views, key=lambda v: (v.outstanding, v.served), default=None)


def choose_upstream(
    upstreams: Sequence[View],
    *,
    alias_variant: str | None = None,
    prompt_tokens: float | None = None,
    classes: Sequence[WorkloadClass] = (),
    spill: int = 0,
) -> Choice | None:
    """The upstream for one request (see the module docstring); None when none is ready."""
    ready = [u for u in upstreams if u.ready]
    if not ready:
        return None
    by_variant: dict[str, list[View]] = {}
    for u in ready:
        by_variant.setdefault(u.variant, []).append(u)
    if alias_variant is not None and alias_variant in by_variant:
        pick = _least(by_variant[alias_variant])
        assert pick is not None
        return Choice(pick.name, pick.variant, "alias")
    choice = _by_class(ready, by_variant, prompt_tokens, classes)
    if spill > 0:
        chosen = next(u for u in ready if u.name == choice.name)
        other = _least([u for u in ready if u.variant != chosen.variant])
        if (
            other is not None
            and chosen.outstanding - chosen.spilled - other.outstanding >= spill
            and other.outstanding + 1 < capacity(classes, other.variant)
        ):
            return Choice(other.name, other.variant, "spill")
    return choice


def _by_class(
    ready: Sequence[View],
    by_variant: dict[str, list[View]],
    prompt_tokens: float | None,
    classes: Sequence[WorkloadClass],
) -> Choice:
    """Steps 3-4 of the module docstring."""
    missing = False
    if prompt_tokens is not None and classes:
        ordered = bucket_classes(classes, prompt_tokens)
        skipped = False
        last: View | None = None
        for i, c in enumerate(ordered):
            pick = _least(by_variant.get(c.variant, ()))
            if pick is None:
                missing = True
                continue
            last = pick
            if pick.outstanding - pick.spilled < crossover(ordered, i):
                reason = "crossover" if skipped else "fallback" if missing else "class"
                return Choice(pick.name, pick.variant, reason)
            skipped = True
        if last is not None:
            return Choice(last.name, last.variant, "crossover")
    pick = _least(ready)
    assert pick is not None
    return Choice(pick.name, pick.variant, "fallback" if missing else "balance")
