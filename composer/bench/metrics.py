"""vLLM's Prometheus metrics: parse the text format, take counter deltas, derive acceptance.

Acceptance comes from counter deltas around the measured requests (never absolute values):
rate = accepted / draft tokens; tokens per iteration = 1 + accepted / drafts; at position
i = accepted_per_pos[i] / drafts.
"""

from __future__ import annotations

import contextlib
import re
import threading
from dataclasses import dataclass

import httpx

from composer.errors import BenchError

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')

Labels = frozenset[tuple[str, str]]
Samples = dict[tuple[str, Labels], float]


def parse_prometheus(text: str) -> Samples:
    """Samples of a Prometheus text exposition keyed by (name, labels); comments skipped."""
    samples: Samples = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())  # a comment or a blank line never matches
        if match is None:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        labels = frozenset((m["key"], m["value"]) for m in _LABEL.finditer(match["labels"] or ""))
        samples[(match["name"], labels)] = value
    return samples


def total(samples: Samples, name: str, **match: str) -> float:
    """Sum of a metric over every label set that contains the given labels."""
    wanted = set(match.items())
    return sum(v for (n, labels), v in samples.items() if n == name and wanted <= labels)


@dataclass(frozen=True)
class SpecCounters:
    """The speculative-decoding counters at one moment (or their difference)."""

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_pos: tuple[float, ...]
    generation_tokens: float

    @classmethod
    def from_samples(cls, samples: Samples) -> SpecCounters:
        """Read the counters (zeros and no positions when speculation is off)."""
        positions = sorted({int(dict(labels)["position"]) for n, labels in samples if n == ACCEPTED_PER_POS})
        return cls(
            drafts=total(samples, DRAFTS),
            draft_tokens=total(samples, DRAFT_TOKENS),
            accepted=total(samples, ACCEPTED),
            accepted_per_pos=tuple(total(samples, ACCEPTED_PER_POS, position=str(p)) for p in positions),
            generation_tokens=total(samples, GENERATION_TOKENS),
        )

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        if len(before.accepted_per_pos) not in (0, len(self.accepted_per_pos)):
            raise BenchError("the number of draft positions changed between two /metrics samples")
        earlier = before.accepted_per_pos or (0.0,) * len(self.accepted_per_pos)
        delta = SpecCounters(
            drafts=self.drafts - before.drafts,
            draft_tokens=self.draft_tokens - before.draft_tokens,
            accepted=self.accepted - before.accepted,
            accepted_per_pos=tuple(a - b for a, b in zip(self.accepted_per_pos, earlier, strict=True)),
            generation_tokens=self.generation_tokens - before.generation_tokens,
        )
        if min(delta.drafts, delta.draft_tokens, delta.accepted, delta.generation_tokens) < 0:
            raise BenchError("a /metrics counter went backwards: the server restarted during the run")
        return delta


@dataclass(frozen=True)
class Acceptance:
    """Acceptance derived from a counter delta."""

    drafts: int
    draft_tokens: int
    accepted: int
    rate: float
    tokens_per_iteration: float
    per_position: tuple[float, ...]


def acceptance(delta: SpecCounters) -> Acceptance | None:
    """Acceptance over a delta, or None when no draft was made in it."""
    if delta.drafts <= 0 or delta.draft_tokens <= 0:
        return None
    return Acceptance(
        drafts=round(delta.drafts),
        draft_tokens=round(delta.draft_tokens),
        accepted=round(delta.accepted),
        rate=delta.accepted / delta.draft_tokens,
        tokens_per_iteration=1.0 + delta.accepted / delta.drafts,
        per_position=tuple(p / delta.drafts for p in delta.accepted_per_pos),
    )


def scrape(client: httpx.Client) -> SpecCounters:
    """GET /metrics from the client's server and read the counters."""
    try:
        response = client.get("/metrics")
    except httpx.HTTPError as err:
        raise BenchError(f"GET /metrics failed: {err}") from err
    if response.status_code != 200:
        raise BenchError(f"GET /metrics answered {response.status_code}")
    return SpecCounters.from_samples(parse_prometheus(response.text))


class RunningSampler:
    """Polls `vllm:num_requests_running` while a block runs; `peak` is the most seen at once
    (the effective concurrency, which a KV budget or `--max-num-seqs` may cap), None when
    no sample could be read. /metrics needs no API key."""

    def __init__(self, base_url: str, interval_s: float = 0.2) -> None:
        self.peak: int | None = None
        self._stop = threading.Event()
        poll = (base_url, interval_s)
        self._thread = threading.Thread(target=self._poll, args=poll, name="bench-running", daemon=True)

    def _poll(self, base_url: str, interval_s: float) -> None:
        with httpx.Client(base_url=base_url, timeout=5.0) as client:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    response = client.get("/metrics")
                    if response.status_code == 200:
                        value = round(total(parse_prometheus(response.text), RUNNING))
                        self.peak = value if self.peak is None else max(self.peak, value)
                if self._stop.wait(interval_s):
                    return

    def __enter__(self) -> RunningSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
