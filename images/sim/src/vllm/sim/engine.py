"""The simulated engine: requests become sequences that advance in shared, timed steps."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from vllm.sim import adaptive, batching, timing
from vllm.sim.acceptance import AcceptanceSampler
from vllm.sim.engine_types import EngineDeadError, GenRequest, RequestStats, SpecSetup, Step
from vllm.sim.failures import exit_after_death, log_engine_dead
from vllm.sim.logs import VllmLog
from vllm.sim.metrics import Metrics
from vllm.sim.profiles import Profile
from vllm.sim.scheduler import Plan, Scheduler
from vllm.sim.textgen import GARBAGE_ID, GARBAGE_TOKEN, TokenStream, decode_id

__all__ = ["Engine", "EngineDeadError", "GenRequest", "RequestStats", "SpecSetup", "Step"]


@dataclass(eq=False)
class Sequence:
    """One request inside the engine."""

    request: GenRequest
    stream: TokenStream
    sampler: AcceptanceSampler
    limit: int
    stopped: bool
    stats: RequestStats
    garbage: bool
    arrival: float
    prompt_tokens: int = 0
    prefilled: int = 0
    produced: int = 0
    last_token_at: float = 0.0
    done: bool = False
    outbox: queue.SimpleQueue[Step] = field(default_factory=queue.SimpleQueue)


class Engine:
    """Generates tokens for requests; a scheduler thread times the shared steps."""

    def __init__(
        self,
        profile: Profile,
        spec: SpecSetup,
        metrics: Metrics,
        time_scale: float,
        flip_rate: float = 0.0,
        max_num_seqs: int | None = None,
        max_num_batched_tokens: int | None = None,
        kv_tokens: int = 0,
    ) -> None:
        self.profile = profile
        self.spec = spec
        self.metrics = metrics
        self.time_scale = time_scale
        self.flip_rate = flip_rate if spec.enabled else 0.0
        self.kv_tokens = kv_tokens
        self.dead = False
        self.zero_acceptance = False
        self.garbage_output = False
        self.crash_on_next_request: str | None = None
        self.worker_error_on_first_request: str | None = None
        """A worker failure on the first request (a head size CPU_ATTN cannot run): the engine
        dies with it, the request gets HTTP 500 and the server exits (code 0)."""
        if spec.enabled:
            assert spec.method is not None
            self.acceptance = timing.acceptance(profile, spec.method, spec.k, spec.block_size)
        else:
            self.acceptance = ()
        self.scheduler = Scheduler(
            self._cost,
            self._apply,
            time_scale,
            adaptive.max_running(spec.method, spec.hybrid, max_num_seqs or profile.batching.max_num_seqs),
            max_num_batched_tokens or profile.batching.max_num_batched_tokens,
            batching.decode_tokens(spec.method, spec.k, 1),
        )

    # ---- requests -----------------------------------------------------------------------
    def check_alive(self) -> None:
        """Raise :class:`EngineDeadError` when the engine is dead (or dies on this request)."""
        if self.crash_on_next_request is not None and not self.dead:
            self.dead = True
            log_engine_dead(self.crash_on_next_request, VllmLog("APIServer"))
        if self.worker_error_on_first_request is not None and not self.dead:
            self.dead = True
            error = self.worker_error_on_first_request
            VllmLog("Worker").error("multiproc_executor.py:1063", f"RuntimeError: {error}")
            api = VllmLog("APIServer")
            log_engine_dead(
                f"RuntimeError: Worker failed with error '{error}', please check the stack trace "
                "above for the root cause",
                api,
            )
            exit_after_death(api)
        if self.dead:
            raise EngineDeadError()

    def generate(self, request: GenRequest, stats: RequestStats | None = None) -> Iterator[Step]:
        """Yield steps as they complete in wall-clock time; the last one has a finish reason."""
        self.check_alive()
        seq = self._sequence(request, stats if stats is not None else RequestStats())
        self.scheduler.submit(seq)
        self._gauges()
        try:
            while True:
                step = seq.outbox.get()
                if step.finish_reason == "error" and self.dead:
                    raise EngineDeadError()
                yield step
                if step.finish_reason is not None:
                    return
        finally:
            if not seq.done:
                self.scheduler.drop(seq)
                self._gauges()

    def _sequence(self, request: GenRequest, stats: RequestStats) -> Sequence:
        stats.accepted_per_pos = [0] * self.spec.k
        stream = TokenStream(request.prompt_key, request.sample_key, self.flip_rate)
        limit = request.max_tokens
        # A continued request ends where the uninterrupted one would (at least one token).
        natural = max(1, stream.natural_length() - request.offset)
        stopped = not request.ignore_eos and natural < limit
        probabilities = () if self.zero_acceptance else self.acceptance
        return Sequence(
            request=request,
            stream=stream,
            sampler=AcceptanceSampler(probabilities),
            limit=natural if stopped else limit,
            stopped=stopped,
            stats=stats,
            garbage=self.garbage_output,
            arrival=time.monotonic(),
            prompt_tokens=request.prompt_tokens,
        )

    # ---- sleep mode hooks ---------------------------------------------------------------
    def pause(self, abort: bool) -> None:
        """Hold new requests; abort the in-flight ones, or wait for them to finish."""
        self.scheduler.pause()
        if abort:
            for seq in self.scheduler.take_all():
                seq.outbox.put(Step([], "abort"))
                with self.metrics.lock:
                    self.metrics.finished["abort"] += 1
        else:
            self.scheduler.drain()
        self._gauges()

    def fail_all(self) -> None:
        """The engine died: every request in it, held ones included, ends with an error."""
        for seq in self.scheduler.take_all(held=True):
            seq.outbox.put(Step([], "error"))
        self._gauges()

    def resume(self) -> None:
        """Serve the held requests again."""
        self.scheduler.resume()
        self._gauges()

    # ---- the step callbacks (run on the scheduler thread) -------------------------------
    def step_k(self, seqs: int) -> int:
        """K of a step with ``seqs`` decoding sequences (the schedule's, else the fixed K)."""
        return adaptive.k_at(self.spec.schedule, self.spec.k, seqs) if self.spec.enabled else 0

    def _cost(self, plan: Plan) -> float:
        seqs = len(plan.decode)
        if seqs <= 0 or not self.spec.enabled:
            return batching.step_seconds(
                self.profile, self.spec.method, self.spec.k, seqs, plan.prefill_tokens
            )
        k = self.step_k(seqs)
        decode = batching.decode_seconds(self.profile, self.spec.method if k > 0 else None, k, seqs)
        spec = self.spec
        factor = adaptive.decode_factor(
            dynamic=spec.schedule is not None,
            piecewise=spec.piecewise,
            adaptive=spec.adaptive,
            k=k,
            seqs=seqs,
        )
        return decode * factor + plan.prefill_tokens / self.profile.prefill_tok_s

    def _apply(self, plan: Plan, now: float) -> None:
        step_tokens = plan.prefill_tokens
        k = self.step_k(len(plan.decode))
        for seq in plan.decode:
            assert isinstance(seq, Sequence)
            if seq.done:
                continue
            step_tokens += batching.decode_tokens(self.spec.method, k, 1)
            count = self._iteration(seq, k)
            with self.metrics.lock:
                self.metrics.itl.observe(now - seq.last_token_at)
            self._emit(seq, count, now)
        for seq, chunk in plan.prefill:
            assert isinstance(seq, Sequence)
            if seq.done:
                continue
            seq.prefilled += chunk
            if seq.prefilled >= seq.prompt_tokens:
                with self.metrics.lock:
                    self.metrics.prompt_tokens += seq.prompt_tokens
                    self.metrics.ttft.observe(now - seq.arrival)
                self._emit(seq, 1, now)
        with self.metrics.lock:
            self.metrics.iteration_tokens.observe(step_tokens)
        self._gauges()

    def _emit(self, seq: Sequence, count: int, now: float) -> None:
        if seq.garbage:
            ids, tokens = [GARBAGE_ID] * count, [GARBAGE_TOKEN] * count
        else:
            start = seq.request.offset + seq.produced
            ids = [seq.stream.token(i) for i in range(start, start + count)]
            tokens = [decode_id(i) for i in ids]
        seq.produced += count
        seq.stats.generated = seq.produced
        seq.last_token_at = now
        finish = None
        if seq.produced >= seq.limit:
            finish = "stop" if seq.stopped else "length"
            seq.done = True
        with self.metrics.lock:
            self.metrics.generation_tokens += count
            if finish is not None:
                self.metrics.e2e.observe(now - seq.arrival)
                self.metrics.finished[finish] += 1
        seq.outbox.put(Step(tokens, finish, ids))

    def _iteration(self, seq: Sequence, k: int) -> int:
        """Tokens produced by one decode iteration drafting ``k`` (records speculative counters)."""
        if not self.spec.enabled or k <= 0:
            return 1
        stats = seq.stats
        accepted = min(seq.sampler.next_accepted(), k, seq.limit - seq.produced - 1)
        stats.drafts += 1
        stats.draft_tokens += k
        stats.accepted += accepted
        for pos in range(accepted):
            stats.accepted_per_pos[pos] += 1
        self.metrics.record_iteration(k, accepted)
        return accepted + 1

    def _gauges(self) -> None:
        running = self.scheduler.contexts()
        _, waiting = self.scheduler.counts()
        used = sum(min(s.prefilled, s.prompt_tokens) + getattr(s, "produced", 0) for s in running)
        with self.metrics.lock:
            self.metrics.running = len(running)
            self.metrics.waiting = waiting
            self.metrics.kv_usage = min(1.0, used / self.kv_tokens) if self.kv_tokens > 0 else 0.0
