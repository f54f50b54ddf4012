"""Per-variant throughput and acceptance from samples of the backend's `/metrics` (vLLM's names).

`parse` keeps only the families it needs (a line filter, then prometheus_client's parser on
what is left) and sums each over its series (several engines or model names). `Samples`
keeps a bounded series per variant and answers rates over a window the way Prometheus'
`rate()` does: deltas of counters, a counter that went down was reset (a restarted server)
and counts from zero, and no rate spans a gap longer than `max_gap` (a variant that did not
serve meanwhile).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

COUNTERS = {
    "vllm:generation_tokens_total": "generation",
    "vllm:prompt_tokens_total": "prompt",
    "vllm:spec_decode_num_drafts_total": "drafts",
    "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens_total": "accepted",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GAUGES = {
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
}
WANTED = frozenset({*COUNTERS, PER_POSITION, *GAUGES})
WINDOW_S = 60.0
KEEP_SAMPLES = 200


@dataclass(frozen=True)
class Sample:
    """One read of a backend's metrics: counters, per-position acceptance and gauges."""

    t: float  # wall-clock seconds
    counters: dict[str, float]
    per_position: tuple[float, ...] = ()
    gauges: dict[str, float] = field(default_factory=dict)


def parse(text: str, t: float) -> Sample:
    """A `Sample` from Prometheus text (families that are absent are simply missing)."""
    keep = []
    for line in text.splitlines():
        if line and line[0] != "#" and line.split("{", 1)[0].split(" ", 1)[0] in WANTED:
            keep.append(line)
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    positions: dict[int, float] = {}
    for family in text_string_to_metric_families("\n".join(keep) + "\n"):
        for s in family.samples:
            if s.name in COUNTERS:
                key = COUNTERS[s.name]
                counters[key] = counters.get(key, 0.0) + s.value
            elif s.name in GAUGES:
                key, old = GAUGES[s.name], gauges.get(GAUGES[s.name], 0.0)
                gauges[key] = max(old, s.value) if key == "kv_cache_usage" else old + s.value
            elif s.name == PER_POSITION and s.labels.get("position", "").isdigit():
                pos = int(s.labels["position"])
                positions[pos] = positions.get(pos, 0.0) + s.value
    per_position = tuple(positions.get(i, 0.0) for i in range(max(positions) + 1)) if positions else ()
    return Sample(t, counters, per_position, gauges)


def _delta(new: float, old: float) -> float:
    return new - old if new >= old else new


class Samples:
    """A bounded series of samples per variant, and rates over the last `window` seconds."""

    def __init__(self, max_gap: float, wall: Callable[[], float] = time.time) -> None:
        self.max_gap = max_gap
        self.wall = wall
        self.series: dict[str, deque[Sample]] = {}

    def add(self, variant: str, sample: Sample) -> None:
        self.series.setdefault(variant, deque(maxlen=KEEP_SAMPLES)).append(sample)

    def _pairs(self, variant: str, since: float) -> list[tuple[Sample, Sample]]:
        samples = [s for s in self.series.get(variant, ()) if s.t >= since]
        return [(a, b) for a, b in itertools.pairwise(samples) if 0 < b.t - a.t <= self.max_gap]

    def sparkline(self, variant: str, since: float) -> list[list[float | None]]:
        """[[t, generation tokens/s], ...] between consecutive samples; None marks a gap."""
        points: list[list[float | None]] = []
        last_t: float | None = None
        for a, b in self._pairs(variant, since):
            if last_t is not None and a.t != last_t:
                points.append([round(a.t, 3), None])
            rate = _delta(b.counters.get("generation", 0.0), a.counters.get("generation", 0.0)) / (b.t - a.t)
            points.append([round(b.t, 3), round(rate, 2)])
            last_t = b.t
        return points

    def summary(self, variant: str, window: float = WINDOW_S) -> dict[str, Any]:
        """Rates over the last `window` seconds and the latest gauges (None where unknown)."""
        now = self.wall()
        pairs = self._pairs(variant, now - window)
        seconds = sum(b.t - a.t for a, b in pairs)
        sums: dict[str, float] = {}
        per_pos: list[float] = []
        for a, b in pairs:
            for key in b.counters:
                sums[key] = sums.get(key, 0.0) + _delta(b.counters[key], a.counters.get(key, 0.0))
            for i, value in enumerate(b.per_position):
                old = a.per_position[i] if i < len(a.per_position) else 0.0
                if i >= len(per_pos):
                    per_pos.append(0.0)
                per_pos[i] += _delta(value, old)
        latest = self.series[variant][-1] if self.series.get(variant) else None

        def per_s(key: str) -> float | None:
            return round(sums[key] / seconds, 3) if seconds > 0 and key in sums else None

        drafts = sums.get("drafts", 0.0)
        draft_tokens = sums.get("draft_tokens", 0.0)
        accepted = sums.get("accepted")
        spec = accepted is not None
        return {
            "window_s": round(seconds, 3),
            "tokens_per_s": per_s("generation"),
            "prompt_tokens_per_s": per_s("prompt"),
            "acceptance": round(accepted / draft_tokens, 4) if spec and draft_tokens else None,
            "mean_accepted_length": round(1 + accepted / drafts, 3) if spec and drafts else None,
            "acceptance_per_position": [round(v / drafts, 4) for v in per_pos] if drafts else [],
            "kv_cache_usage": latest.gauges.get("kv_cache_usage") if latest else None,
            "running": latest.gauges.get("running") if latest else None,
            "waiting": latest.gauges.get("waiting") if latest else None,
            "last_sample_at": round(latest.t, 3) if latest else None,
        }
