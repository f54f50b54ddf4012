"""Continuous batching: one thread runs engine steps shared by every running sequence.

Each step takes the running sequences first (a decoding sequence costs 1 token, or
``K + 1`` under speculation; one still prefilling takes the next chunk of its prompt),
then admits waiting ones in arrival order while the token budget
(``max_num_batched_tokens``) and ``max_num_seqs`` allow, like vLLM's V1 scheduler with
chunked prefill. The step then lasts its modelled cost in wall-clock time (scaled), and
its results are handed back to the engine. While paused (sleep mode), new sequences are
held until ``resume``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

# Behind the modelled clock by more than this (real seconds), the clock restarts from now
# instead of running catch-up steps back to back.
MAX_LAG_S = 0.25


class Schedulable(Protocol):
    """What the scheduler needs to know about a sequence."""

    prompt_tokens: int
    prefilled: int
    done: bool


@dataclass
class Plan:
    """One step: the sequences that decode and the prompt chunks that prefill."""

    decode: list[Schedulable] = field(default_factory=list)
    prefill: list[tuple[Schedulable, int]] = field(default_factory=list)

    @property
    def prefill_tokens(self) -> int:
        return sum(chunk for _, chunk in self.prefill)

    def __bool__(self) -> bool:
        return bool(self.decode or self.prefill)


class Scheduler:
    """Runs steps on a daemon thread; ``cost(plan)`` gives unscaled seconds, ``apply`` the results."""

    def __init__(
        self,
        cost: Callable[[Plan], float],
        apply: Callable[[Plan, float], None],
        time_scale: float,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        decode_tokens_per_seq: int,
    ) -> None:
        self._cost = cost
        self._apply = apply
        self._time_scale = time_scale
        self._max_seqs = max(1, max_num_seqs)
        self._budget = max(1, max_num_batched_tokens)
        self._per_seq = max(1, decode_tokens_per_seq)
        self._cond = threading.Condition()
        self._waiting: deque[Schedulable] = deque()
        self._running: list[Schedulable] = []
        self._held: list[Schedulable] = []
        self._paused = False
        self._thread: threading.Thread | None = None
        self._clock = 0.0

    # ---- called by request threads ----------------------------------------------------
    def submit(self, seq: Schedulable) -> None:
        """Queue a sequence (held while paused)."""
        with self._cond:
            (self._held if self._paused else self._waiting).append(seq)
            self._start()
            self._cond.notify_all()

    def drop(self, seq: Schedulable) -> None:
        """Forget a sequence whose client went away."""
        with self._cond:
            seq.done = True
            self._forget(seq)
            self._cond.notify_all()

    def counts(self) -> tuple[int, int]:
        """(running, waiting) sequences; held ones count as waiting."""
        with self._cond:
            running = sum(not seq.done for seq in self._running)
            return running, len(self._waiting) + len(self._held)

    def contexts(self) -> list[Schedulable]:
        """The running sequences that have not finished (for KV usage)."""
        with self._cond:
            return [seq for seq in self._running if not seq.done]

    # ---- sleep mode ---------------------------------------------------------------------
    def pause(self) -> None:
        """Hold sequences submitted from now on; the ones already queued keep running."""
        with self._cond:
            self._paused = True

    def take_all(self, held: bool = False) -> list[Schedulable]:
        """Remove every queued and running sequence (to abort them), and held ones if asked."""
        with self._cond:
            taken = [*self._running, *self._waiting, *(self._held if held else ())]
            self._running.clear()
            self._waiting.clear()
            if held:
                self._held.clear()
            for seq in taken:
                seq.done = True
            self._cond.notify_all()
            return taken

    def drain(self) -> None:
        """Block until every queued and running sequence has finished."""
        with self._cond:
            while self._running or self._waiting:
                self._cond.wait(0.5)

    def resume(self) -> None:
        """Release held sequences and schedule again."""
        with self._cond:
            self._paused = False
            self._waiting.extend(self._held)
            self._held.clear()
            self._cond.notify_all()

    # ---- the step loop ------------------------------------------------------------------
    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="sim-engine-core", daemon=True)
            self._thread.start()

    def _forget(self, seq: Schedulable) -> None:
        for queue in (self._running, self._held):
            if seq in queue:
                queue.remove(seq)
        if seq in self._waiting:
            self._waiting.remove(seq)

    def _plan(self) -> Plan:
        plan = Plan()
        budget = self._budget
        for seq in self._running:
            if seq.prefilled >= seq.prompt_tokens:
                if budget >= self._per_seq:
                    plan.decode.append(seq)
                    budget -= self._per_seq
            elif budget > 0:
                chunk = min(seq.prompt_tokens - seq.prefilled, budget)
                plan.prefill.append((seq, chunk))
                budget -= chunk
        while self._waiting and budget > 0 and len(self._running) < self._max_seqs:
            seq = self._waiting.popleft()
            self._running.append(seq)
            chunk = min(seq.prompt_tokens - seq.prefilled, budget)
            plan.prefill.append((seq, chunk))
            budget -= chunk
        return plan

    def _loop(self) -> None:
        while True:
            with self._cond:
                plan = self._plan()
                while not plan:
                    self._cond.wait()
                    plan = self._plan()
                    self._clock = 0.0
            now = time.monotonic()
            if self._clock == 0.0 or now - self._clock > MAX_LAG_S:
                self._clock = now
            self._clock += self._cost(plan) / self._time_scale
            delay = self._clock - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with self._cond:
                self._apply(plan, time.monotonic())
                self._running = [seq for seq in self._running if not seq.done]
                self._cond.notify_all()
