"""Sleep mode seen from outside: sleep/wake durations, memory held, and vLLM's known bugs.

Level 1 copies each GPU's weights to host RAM (pinned or pageable) and drops the KV
cache; level 2 drops both, so a wake needs ``reload_weights`` to read the checkpoint
again. Durations are simulated seconds (scaled by SIM_TIME_SCALE when slept):

- sleep: ``fixed + weights / d2h_bandwidth`` at level 1, ``fixed`` at level 2;
- wake: ``fixed + weights / h2d_bandwidth`` when the weights tag wakes from level 1,
  else ``fixed``; every GPU copies its own share over its own link, in parallel;
- ``reload_weights``: ``weights / reload_bytes_per_s``.

Known vLLM behaviour reproduced: after a level-2 wake the output is garbage until
``reload_weights``; with speculative decoding the reload does not restore the drafter
(acceptance silently 0, output still correct), and EAGLE-style drafters crash instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vllm.sim.engine import Engine
from vllm.sim.engine_types import EngineDeadError
from vllm.sim.failures import log_engine_dead
from vllm.sim.logs import VllmLog
from vllm.sim.sizes import gib

LEVEL_STATES = {1: "weights_offloaded", 2: "discard_all"}
TAGS = ("weights", "kv_cache")
SLEEP_MODES = ("abort", "wait")
# Methods without drafter weights are unaffected by the level-2 reload bug.
WEIGHTLESS_METHODS = ("ngram", "ngram_gpu", "suffix")
CRASHING_METHODS = ("eagle", "eagle3")
WAKE_OOM = "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62"
EAGLE_CRASH = "RuntimeError: CUDA error: an illegal memory access was encountered"


@dataclass(frozen=True)
class SleepConfig:
    """Sizes and bandwidths of the sleep model (bytes are per GPU, rates per GPU link)."""

    weights_bytes: int
    awake_bytes: int
    residue_bytes: int
    tensor_parallel: int
    pinned: bool
    h2d_pinned: float
    h2d_pageable: float
    d2h_pinned: float
    d2h_pageable: float
    reload_bytes_per_s: float
    fixed_seconds: float

    @property
    def h2d(self) -> float:
        return self.h2d_pinned if self.pinned else self.h2d_pageable

    @property
    def d2h(self) -> float:
        return self.d2h_pinned if self.pinned else self.d2h_pageable


def sleep_seconds(cfg: SleepConfig, level: int) -> float:
    """Simulated time to fall asleep at ``level``."""
    copy = cfg.weights_bytes / cfg.d2h if level == 1 else 0.0
    return cfg.fixed_seconds + copy


def wake_seconds(cfg: SleepConfig, level: int, tags: Sequence[str]) -> float:
    """Simulated time to wake ``tags`` from ``level``."""
    copy = cfg.weights_bytes / cfg.h2d if level == 1 and "weights" in tags else 0.0
    return cfg.fixed_seconds + copy


def reload_seconds(cfg: SleepConfig) -> float:
    """Simulated time of ``collective_rpc reload_weights`` (reading the checkpoint again)."""
    return cfg.weights_bytes / cfg.reload_bytes_per_s


class SleepError(ValueError):
    """A bad sleep/wake/rpc request (HTTP 400 or 500 with this message)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class SleepMode:
    """The engine's sleep state machine; one operation at a time."""

    def __init__(
        self,
        engine: Engine,
        cfg: SleepConfig,
        fail: str,
        wait: Callable[[float], None],
        log: VllmLog,
        api_log: VllmLog,
    ) -> None:
        self.engine = engine
        self.cfg = cfg
        self.fail = fail
        self._wait = wait
        self.core = log
        self.api = api_log
        self.level = 0
        self.sleeping_tags: set[str] = set()
        self._weights_lost = False
        self._lock = threading.Lock()
        self._set_memory()

    @property
    def is_sleeping(self) -> bool:
        return bool(self.sleeping_tags)

    # ---- operations ---------------------------------------------------------------------
    def sleep(self, level: int, mode: str) -> None:
        """``POST /sleep?level=&mode=``: stop or drain requests, then release the GPU."""
        if level not in LEVEL_STATES:
            raise SleepError(f"Invalid sleep level {level}; expected 1 or 2")
        if mode not in SLEEP_MODES:
            raise SleepError(f"Invalid sleep mode '{mode}'. Must be one of 'abort', 'wait'.")
        with self._lock:
            self._check_alive()
            if self.is_sleeping:
                self.core.warning("abstract.py:315", "Executor is already sleeping.")
                return
            self.engine.pause(abort=mode == "abort")
            started = time.monotonic()
            self._wait(sleep_seconds(self.cfg, level))
            self._log_workers(
                "gpu_worker.py:134",
                f"Sleep mode freed {gib(self.cfg.awake_bytes - self.cfg.residue_bytes):.2f} GiB memory, "
                f"{gib(self.cfg.residue_bytes):.2f} GiB memory is still in use.",
            )
            self.core.info(
                "abstract.py:323", f"It took {time.monotonic() - started:.6f} seconds to fall asleep."
            )
            self.level = level
            self.sleeping_tags = set(TAGS)
            self._weights_lost = level == 2
            with self.engine.metrics.lock:
                self.engine.metrics.sleep_state = LEVEL_STATES[level]
            self._set_memory()

    def wake_up(self, tags: list[str] | None) -> None:
        """``POST /wake_up[?tags=...]``: restore the tags (all when none is given)."""
        self.api.info("api_router.py:57", f"wake up the engine with tags: {tags}")
        with self._lock:
            self._check_alive()
            if not self.is_sleeping:
                self.core.warning("abstract.py:328", "Executor is not sleeping.")
                return
            for tag in tags or ():
                if tag not in self.sleeping_tags:
                    self.core.warning(
                        "abstract.py:333", f"Tag {tag} is not in sleeping tags {self.sleeping_tags}"
                    )
                    return
            waking = list(tags) if tags else sorted(self.sleeping_tags)
            started = time.monotonic()
            if self.fail == "wake-fail":
                self._wait(wake_seconds(self.cfg, self.level, waking) / 2)
                self._die(WAKE_OOM)
                raise EngineDeadError()
            self._wait(wake_seconds(self.cfg, self.level, waking))
            shown = tags if tags else set(self.sleeping_tags)
            self.core.info(
                "abstract.py:345",
                f"It took {time.monotonic() - started:.6f} seconds to wake up tags {shown}.",
            )
            self.sleeping_tags -= set(waking)
            self._set_memory()
            if not self.sleeping_tags:
                self._finish_wake()

    def collective_rpc(self, method: str) -> list[None]:
        """``POST /collective_rpc``: only ``reload_weights`` is modelled."""
        with self._lock:
            self._check_alive()
            if method != "reload_weights":
                raise SleepError(f"'Worker' object has no attribute '{method}'", status=500)
            self._log_workers("gpu_model_runner.py:2716", "Reloading weights inplace...")
            started = time.monotonic()
            self._wait(reload_seconds(self.cfg))
            self.core.info(
                "default_loader.py:267", f"Loading weights took {time.monotonic() - started:.2f} seconds"
            )
            if self._weights_lost and "weights" not in self.sleeping_tags:
                self._weights_lost = False
                self.engine.garbage_output = False
                self._drafter_bug()
            return [None] * self.cfg.tensor_parallel

    # ---- helpers ------------------------------------------------------------------------
    def _log_workers(self, where: str, message: str) -> None:
        """A worker-side line: from the engine core at TP 1, else once per ``Worker_TP<i>``."""
        if self.cfg.tensor_parallel == 1:
            self.core.info(where, message)
            return
        for rank in range(self.cfg.tensor_parallel):
            VllmLog(f"Worker_TP{rank}").info(where, message)

    def _finish_wake(self) -> None:
        level, self.level = self.level, 0
        with self.engine.metrics.lock:
            self.engine.metrics.sleep_state = "awake"
        if level == 2 and self._weights_lost:
            self.engine.garbage_output = True
        if self.fail == "wake-zero-acceptance":
            self.engine.zero_acceptance = True
        self.engine.resume()

    def _drafter_bug(self) -> None:
        method = self.engine.spec.method
        if not self.engine.spec.enabled or method in WEIGHTLESS_METHODS:
            return
        if method in CRASHING_METHODS:
            self.engine.crash_on_next_request = EAGLE_CRASH
        else:
            self.engine.zero_acceptance = True

    def _check_alive(self) -> None:
        if self.engine.dead:
            raise EngineDeadError()

    def _die(self, exception: str) -> None:
        self.engine.dead = True
        log_engine_dead(exception, self.api)
        self.engine.fail_all()

    def _set_memory(self) -> None:
        cfg = self.cfg
        gpu = cfg.residue_bytes
        if "weights" not in self.sleeping_tags:
            gpu = cfg.awake_bytes if not self.sleeping_tags else cfg.residue_bytes + cfg.weights_bytes
        host = (
            cfg.weights_bytes * cfg.tensor_parallel
            if self.level == 1 and "weights" in self.sleeping_tags
            else 0
        )
        with self.engine.metrics.lock:
            self.engine.metrics.gpu_memory_bytes = [gpu] * cfg.tensor_parallel
            self.engine.metrics.host_memory_bytes = host
