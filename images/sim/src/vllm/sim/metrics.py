"""Prometheus counters and histograms with vLLM's metric names."""

from __future__ import annotations

import threading
from collections.abc import Sequence

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


class Histogram:
    """A cumulative-bucket histogram."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.total += 1
        self.sum += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1


class Metrics:
    """Engine-wide metrics; all updates are thread safe."""

    def __init__(self, model_name: str, spec_k: int) -> None:
        self.model_name = model_name
        self.spec_k = spec_k
        self.lock = threading.Lock()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.requests_success = 0
        self.running = 0
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted_tokens = 0
        self.accepted_per_pos = [0] * spec_k
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.sleep_state: str | None = None

    def record_iteration(self, draft_k: int, accepted: int) -> None:
        """One speculative iteration: K drafted, a prefix of ``accepted`` kept."""
        with self.lock:
            self.drafts += 1
            self.draft_tokens += draft_k
            self.accepted_tokens += accepted
            for pos in range(accepted):
                self.accepted_per_pos[pos] += 1

    def render(self) -> str:
        """Prometheus text exposition."""
        labels = f'engine="0",model_name="{self.model_name}"'
        out: list[str] = []

        def counter(name: str, help_text: str, value: float) -> None:
            out.append(f"# HELP {name}_total {help_text}")
            out.append(f"# TYPE {name}_total counter")
            out.append(f"{name}_total{{{labels}}} {float(value)}")

        def gauge(name: str, help_text: str, value: float) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} gauge")
            out.append(f"{name}{{{labels}}} {float(value)}")

        def histogram(name: str, help_text: str, hist: Histogram) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} histogram")
            for bound, count in zip(hist.buckets, hist.counts, strict=True):
                out.append(f'{name}_bucket{{{labels},le="{bound}"}} {float(count)}')
            out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(hist.total)}')
            out.append(f"{name}_count{{{labels}}} {float(hist.total)}")
            out.append(f"{name}_sum{{{labels}}} {hist.sum}")

        with self.lock:
            gauge("vllm:num_requests_running", "Number of requests in model execution batches.", self.running)
            gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 0)
            gauge(
                "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", 0.01 * self.running
            )
            counter("vllm:prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens)
            counter(
                "vllm:generation_tokens", "Number of generation tokens processed.", self.generation_tokens
            )
            counter(
                "vllm:request_success", "Count of successfully processed requests.", self.requests_success
            )
            histogram(
                "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft
            )
            histogram(
                "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl
            )
            histogram(
                "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.e2e
            )
            if self.spec_k > 0:
                counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", self.drafts)
                counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", self.draft_tokens)
                counter(
                    "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", self.accepted_tokens
                )
                name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
                out.append(f"# HELP {name} Accepted tokens per draft position.")
                out.append(f"# TYPE {name} counter")
                for pos, count in enumerate(self.accepted_per_pos):
                    out.append(f'{name}{{{labels},position="{pos}"}} {float(count)}')
            if self.sleep_state is not None:
                name = "vllm:engine_sleep_state"
                out.append(f"# HELP {name} Engine sleep state; awake = 0 means engine is sleeping.")
                out.append(f"# TYPE {name} gauge")
                for state in SLEEP_STATES:
                    value = 1.0 if state == self.sleep_state else 0.0
                    out.append(f'{name}{{{labels},sleep_state="{state}"}} {value}')
        return "\n".join(out) + "\n"
