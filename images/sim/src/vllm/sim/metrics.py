"""Prometheus counters, gauges and histograms with vLLM's metric names.

The text follows prometheus_client's exposition (what vLLM serves): ``# HELP``/``# TYPE``
per family, counters as ``NAME_total`` with a ``NAME_created`` gauge family after each
counter and histogram, labels sorted by name, values formatted like Go's floats.
Metrics named ``sim:...`` exist only in the simulator (memory it pretends to hold).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Sequence

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
SLEEP_HELP = (
    "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
    "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."
)


def go_float(value: float) -> str:
    """A float as prometheus_client writes it (Go's switch to exponents included)."""
    value = float(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


class Histogram:
    """A cumulative-bucket histogram."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(float(b) for b in buckets)
        self.counts = [0] * len(self.buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.total += 1
        self.sum += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1


class Exposition:
    """Builds the text of one scrape."""

    def __init__(self, base_labels: dict[str, str], created: float) -> None:
        self.base = base_labels
        self.created = created
        self.lines: list[str] = []

    def _labels(self, extra: dict[str, str] | None = None) -> str:
        labels = {**self.base, **(extra or {})}
        return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))

    def _family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def _created(self, name: str, help_text: str, label_sets: Iterable[dict[str, str] | None]) -> None:
        self._family(f"{name}_created", "gauge", help_text)
        for extra in label_sets:
            self.lines.append(f"{name}_created{{{self._labels(extra)}}} {go_float(self.created)}")

    def gauge(
        self, name: str, help_text: str, samples: Iterable[tuple[dict[str, str] | None, float]]
    ) -> None:
        self._family(name, "gauge", help_text)
        for extra, value in samples:
            self.lines.append(f"{name}{{{self._labels(extra)}}} {go_float(value)}")

    def counter(
        self, name: str, help_text: str, samples: Iterable[tuple[dict[str, str] | None, float]]
    ) -> None:
        samples = list(samples)
        self._family(f"{name}_total", "counter", help_text)
        for extra, value in samples:
            self.lines.append(f"{name}_total{{{self._labels(extra)}}} {go_float(value)}")
        self._created(name, help_text, (extra for extra, _ in samples))

    def histogram(self, name: str, help_text: str, hist: Histogram) -> None:
        self._family(name, "histogram", help_text)
        for bound, count in zip(hist.buckets, hist.counts, strict=True):
            self.lines.append(f"{name}_bucket{{{self._labels({'le': go_float(bound)})}}} {go_float(count)}")
        self.lines.append(f"{name}_bucket{{{self._labels({'le': '+Inf'})}}} {go_float(hist.total)}")
        self.lines.append(f"{name}_count{{{self._labels()}}} {go_float(hist.total)}")
        self.lines.append(f"{name}_sum{{{self._labels()}}} {go_float(hist.sum)}")
        self._created(name, help_text, [None])

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class Metrics:
    """Engine-wide metrics; all updates are thread safe."""

    def __init__(self, model_name: str, spec_k: int) -> None:
        self.model_name = model_name
        self.spec_k = spec_k
        self.lock = threading.Lock()
        self.created = time.time()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished = dict.fromkeys(FINISH_REASONS, 0)
        self.running = 0
        self.waiting = 0
        self.kv_usage = 0.0
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted_tokens = 0
        self.accepted_per_pos = [0] * spec_k
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.iteration_tokens = Histogram(ITERATION_TOKEN_BUCKETS)
        self.sleep_state = "awake"
        self.gpu_memory_bytes: list[int] = []
        self.host_memory_bytes = 0

    @property
    def requests_success(self) -> int:
        """Finished requests, whatever the reason."""
        return sum(self.finished.values())

    def record_iteration(self, draft_k: int, accepted: int) -> None:
        """One speculative iteration: K drafted, a prefix of ``accepted`` kept."""
        with self.lock:
            self.drafts += 1
            self.draft_tokens += draft_k
            self.accepted_tokens += accepted
            for pos in range(accepted):
                self.accepted_per_pos[pos] += 1

    def render(self) -> str:
        """Prometheus text exposition (vLLM's families in vLLM's order, then ``sim:``)."""
        out = Exposition({"engine": "0", "model_name": self.model_name}, self.created)
        with self.lock:
            out.gauge(
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                [(None, self.running)],
            )
            out.gauge(
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                [(None, self.waiting)],
            )
            out.gauge(
                "vllm:engine_sleep_state",
                SLEEP_HELP,
                [({"sleep_state": s}, 1.0 if (s == self.sleep_state) else 0.0) for s in SLEEP_STATES],
            )
            out.gauge(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                [(None, self.kv_usage)],
            )
            out.counter(
                "vllm:num_preemptions", "Cumulative number of preemption from the engine.", [(None, 0)]
            )
            out.counter(
                "vllm:prompt_tokens", "Number of prefill tokens processed.", [(None, self.prompt_tokens)]
            )
            out.counter(
                "vllm:generation_tokens",
                "Number of generation tokens processed.",
                [(None, self.generation_tokens)],
            )
            out.counter(
                "vllm:request_success",
                "Count of successfully processed requests.",
                [({"finished_reason": r}, n) for r, n in self.finished.items()],
            )
            out.histogram(
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
                self.iteration_tokens,
            )
            out.histogram(
                "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft
            )
            out.histogram(
                "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl
            )
            out.histogram(
                "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.e2e
            )
            if self.spec_k > 0:
                out.counter(
                    "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [(None, self.drafts)]
                )
                out.counter(
                    "vllm:spec_decode_num_draft_tokens",
                    "Number of draft tokens.",
                    [(None, self.draft_tokens)],
                )
                out.counter(
                    "vllm:spec_decode_num_accepted_tokens",
                    "Number of accepted tokens.",
                    [(None, self.accepted_tokens)],
                )
                out.counter(
                    "vllm:spec_decode_num_accepted_tokens_per_pos",
                    "Accepted tokens per draft position.",
                    [({"position": str(p)}, n) for p, n in enumerate(self.accepted_per_pos)],
                )
            out.gauge(
                "sim:gpu_memory_used_bytes",
                "Simulator only: GPU memory the engine holds on each GPU (residue while asleep).",
                [({"gpu": str(i)}, b) for i, b in enumerate(self.gpu_memory_bytes)],
            )
            out.gauge(
                "sim:host_memory_used_bytes",
                "Simulator only: host RAM holding offloaded weights (sleep level 1).",
                [(None, self.host_memory_bytes)],
            )
        return out.text()
