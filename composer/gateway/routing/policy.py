"""The automatic policy's arithmetic: workload classes, the traffic window and the choice (pure).

A workload class (what `compose-spec recommend` measured, mapped to a variant by the stack's
`[workloads]`) comes in `GATEWAY_WORKLOADS` as `NAME:MIN:MAX:TOKENS:STREAMS[:CROSSOVER]=VARIANT`
items, comma-separated: the bucket's prompt tokens from MIN to MAX (0: no bound), TOKENS the
measured length (0: none), STREAMS the concurrency, CROSSOVER the outstanding requests on one
replica from which live routing sends the class elsewhere (`routing`; absent or 0: derived).

The window's mix is the median estimated prompt and the mean of the outstanding requests sampled
at each tick, over the last `seconds`. `choose` picks the class whose bucket holds the median
prompt (else the nearest), then the nearest measured length, then the nearest concurrency, both
on a log scale.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkloadClass:
    """One measured workload class and the variant that won it."""

    name: str
    min_tokens: int
    max_tokens: int | None
    tokens: int | None
    streams: int
    variant: str
    crossover: int | None = None


def parse_workloads(raw: str) -> tuple[WorkloadClass, ...]:
    """The classes of a `GATEWAY_WORKLOADS` value; ValueError naming a bad item."""
    classes = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        head, sep, variant = item.partition("=")
        fields = head.split(":")
        try:
            if not sep or not variant or len(fields) not in (5, 6) or not fields[0]:
                raise ValueError
            low, high, tokens, streams, *rest = (int(f) for f in fields[1:])
            cross = rest[0] if rest else 0
            if min(low, high, tokens, cross) < 0 or streams < 1 or (high and high < low):
                raise ValueError
        except ValueError:
            allowed = "NAME:MIN:MAX:TOKENS:STREAMS[:CROSSOVER]=VARIANT"
            raise ValueError(f"item {item!r}: allowed {allowed}") from None
        classes.append(
            WorkloadClass(fields[0], low, high or None, tokens or None, streams, variant, cross or None)
        )
    return tuple(classes)


@dataclass(frozen=True)
class Mix:
    """The traffic of a window: median prompt tokens, mean outstanding requests, requests seen."""

    prompt_tokens: float
    concurrency: float
    requests: int


class Window:
    """A sliding window of prompt sizes and concurrency samples (times are monotonic seconds)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._prompts: deque[tuple[float, int]] = deque()
        self._samples: deque[tuple[float, int]] = deque()

    def _trim(self, now: float) -> None:
        start = now - self.seconds
        for queue in (self._prompts, self._samples):
            while queue and queue[0][0] < start:
                queue.popleft()

    def add_request(self, now: float, prompt_tokens: int) -> None:
        self._prompts.append((now, prompt_tokens))
        self._trim(now)

    def sample(self, now: float, outstanding: int) -> None:
        self._samples.append((now, outstanding))
        self._trim(now)

    def clear(self) -> None:
        """Forget everything (after a switch: the new variant is judged on its own traffic)."""
        self._prompts.clear()
        self._samples.clear()

    def mix(self, now: float, min_requests: int = 1) -> Mix | None:
        """The window's mix, or None with fewer than `min_requests` requests in it."""
        self._trim(now)
        if len(self._prompts) < max(1, min_requests) or not self._samples:
            return None
        median = statistics.median(tokens for _, tokens in self._prompts)
        mean = statistics.fmean(n for _, n in self._samples)
        return Mix(float(median), mean, len(self._prompts))


def _log_gap(a: float, b: float) -> float:
    return abs(math.log(max(a, 1.0)) - math.log(max(b, 1.0)))


def _bucket_gap(c: WorkloadClass, tokens: float) -> float:
    """0 when the class's bucket holds `tokens`, else the log distance to its nearest edge."""
    if tokens < c.min_tokens:
        return _log_gap(c.min_tokens, tokens)
    if c.max_tokens is not None and tokens > c.max_tokens:
        return _log_gap(c.max_tokens, tokens)
    return 0.0


def choose(classes: tuple[WorkloadClass, ...], mix: Mix) -> WorkloadClass | None:
    """The class that best describes the mix (None without classes)."""
    if not classes:
        return None

    def key(c: WorkloadClass) -> tuple[float, float, float, int]:
        length = _log_gap(c.tokens, mix.prompt_tokens) if c.tokens else 0.0
        return (_bucket_gap(c, mix.prompt_tokens), length, _log_gap(c.streams, mix.concurrency), c.streams)

    return min(classes, key=key)


@dataclass(frozen=True)
class Decision:
    """What the policy wants served, and why (one log line)."""

    variant: str
    workload: str
    reason: str


def decide(classes: tuple[WorkloadClass, ...], mix: Mix | None, serving: str | None) -> Decision | None:
    """The variant for the window's mix; None when the window is too thin to say."""
    if mix is None or (chosen := choose(classes, mix)) is None:
        return None
    verb = "keep" if chosen.variant == serving else "switch to"
    seen = f"prompt p50 {mix.prompt_tokens:.0f} tok, concurrency {mix.concurrency:.1f}"
    reason = f"{seen} over {mix.requests} requests -> {chosen.name} = {chosen.variant} ({verb})"
    return Decision(chosen.variant, chosen.name, reason)
