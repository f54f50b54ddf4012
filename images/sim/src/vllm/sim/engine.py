"""The simulated engine: turns one request into timed steps of generated tokens."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from vllm.sim import timing
from vllm.sim.acceptance import AcceptanceSampler, start_offset
from vllm.sim.metrics import Metrics
from vllm.sim.profiles import Profile
from vllm.sim.textgen import TokenStream


@dataclass(frozen=True)
class SpecSetup:
    """Speculative decoding as configured at boot (``method=None``: plain decode)."""

    method: str | None = None
    k: int = 0
    block_size: int | None = None

    @property
    def enabled(self) -> bool:
        return self.method is not None and self.k > 0


@dataclass(frozen=True)
class GenRequest:
    """What the engine needs from an API request."""

    prompt_key: bytes
    prompt_tokens: int
    max_tokens: int
    ignore_eos: bool = False
    sample_key: str | None = None


@dataclass
class Step:
    """Tokens produced by one engine step for one request."""

    tokens: list[str]
    finish_reason: str | None = None


@dataclass
class RequestStats:
    """Per-request counters (kept for tests and logging)."""

    generated: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)


class Engine:
    """Generates tokens for requests, sleeping to follow the timing model."""

    def __init__(
        self,
        profile: Profile,
        spec: SpecSetup,
        metrics: Metrics,
        time_scale: float,
        seed: int = 0,
        flip_rate: float = 0.0,
    ) -> None:
        self.profile = profile
        self.spec = spec
        self.metrics = metrics
        self.time_scale = time_scale
        self.seed = seed
        self.flip_rate = flip_rate if spec.enabled else 0.0
        self.awake = threading.Event()
        self.awake.set()
        if spec.enabled:
            assert spec.method is not None
            self.acceptance = timing.acceptance(profile, spec.method, spec.k, spec.block_size)
        else:
            self.acceptance = ()
        self.iteration = timing.iteration_seconds(profile, spec.method, spec.k) / time_scale

    def _wait_until(self, deadline: float) -> None:
        delay = deadline - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def generate(self, request: GenRequest, stats: RequestStats | None = None) -> Iterator[Step]:
        """Yield steps as they 'complete' in wall-clock time; update metrics."""
        stats = stats if stats is not None else RequestStats()
        stats.accepted_per_pos = [0] * self.spec.k
        stream = TokenStream(request.prompt_key, request.sample_key, self.flip_rate)
        limit = request.max_tokens
        natural = stream.natural_length()
        stopped = not request.ignore_eos and natural < limit
        if stopped:
            limit = natural
        sampler = AcceptanceSampler(
            self.acceptance, start_offset(self.seed, request.prompt_key.hex(), request.max_tokens)
        )
        self.awake.wait()
        start = time.monotonic()
        with self.metrics.lock:
            self.metrics.running += 1
        try:
            yield from self._steps(request, stream, limit, stopped, sampler, stats, start)
        finally:
            with self.metrics.lock:
                self.metrics.running -= 1

    def _steps(
        self,
        request: GenRequest,
        stream: TokenStream,
        limit: int,
        stopped: bool,
        sampler: AcceptanceSampler,
        stats: RequestStats,
        start: float,
    ) -> Iterator[Step]:
        deadline = start + timing.ttft_seconds(self.profile, request.prompt_tokens) / self.time_scale
        self._wait_until(deadline)
        with self.metrics.lock:
            self.metrics.prompt_tokens += request.prompt_tokens
            self.metrics.ttft.observe(time.monotonic() - start)
        produced = 0
        last = time.monotonic()
        while produced < limit:
            if produced == 0:
                count = 1
            else:
                deadline += self.iteration
                self._wait_until(deadline)
                count = self._iteration(limit - produced, sampler, stats)
                now = time.monotonic()
                with self.metrics.lock:
                    self.metrics.itl.observe(now - last)
                last = now
            tokens = [stream.token(i) for i in range(produced, produced + count)]
            produced += count
            stats.generated = produced
            with self.metrics.lock:
                self.metrics.generation_tokens += count
            finish = None
            if produced >= limit:
                finish = "stop" if stopped else "length"
            yield Step(tokens, finish)
        with self.metrics.lock:
            self.metrics.e2e.observe(time.monotonic() - start)
            self.metrics.requests_success += 1

    def _iteration(self, remaining: int, sampler: AcceptanceSampler, stats: RequestStats) -> int:
        """Tokens produced by one decode iteration (records speculative counters)."""
        if not self.spec.enabled:
            return 1
        accepted = min(sampler.next_accepted(), remaining - 1)
        stats.drafts += 1
        stats.draft_tokens += self.spec.k
        stats.accepted += accepted
        for pos in range(accepted):
            stats.accepted_per_pos[pos] += 1
        self.metrics.record_iteration(self.spec.k, accepted)
        return accepted + 1
