"""Failure injection and vLLM's failure output (log line, traceback, exit code)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

from vllm.sim.logs import VllmLog, traceback_text

ENGINE_FAILED = (
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
)
FAIL_MODES = (
    "hang",
    "crash",
    "crash-after:N",
    "cuda-oom",
    "no-kv-memory",
    "wake-fail",
    "wake-zero-acceptance",
)
FA3_UNSUPPORTED = (
    "Cannot use FA version 3 is not supported due to FA3 is only supported on devices with "
    "compute capability >= 8 excluding 8.6 and 8.9 and Blackwell archs (>=10)"
)
CUDA_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 0 has a total "
    "capacity of 23.52 GiB of which 312.00 MiB is free. Including non-PyTorch memory, this "
    "process has 23.20 GiB memory in use. Of the allocated memory 22.41 GiB is allocated by "
    "PyTorch, and 201.55 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
    "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


CPU_ATTN_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vLLM's CPU attention (CPU_ATTN) has kernels for (`get_supported_head_sizes`)."""


def head_dim(config: dict) -> int | None:
    """The attention head size of a checkpoint config (`head_dim`, else hidden / heads)."""
    for section in (config.get("text_config") or {}, config):
        value = section.get("head_dim")
        if isinstance(value, int) and value > 0:
            return value
        hidden, heads = section.get("hidden_size"), section.get("num_attention_heads")
        if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
            return hidden // heads
    return None


def attention_kernel_error(backend: str, config: dict) -> str | None:
    """The worker's error when CPU_ATTN has no kernel for the model's head size, else None.

    Real vLLM checks this only when the first batch runs: startup and /health succeed, then
    the first request kills the engine (and the server exits).
    """
    size = head_dim(config)
    if backend != "CPU_ATTN" or size is None or size in CPU_ATTN_HEAD_SIZES:
        return None
    return f"Unsupported CPU attention configuration: head_dim={size} isa=2 kv_cache_idx=0"


def exit_after_death(log: VllmLog, delay: float = 0.5) -> threading.Timer:
    """Shut the server down as vLLM does once its engine died on a request (exit code 0)."""

    def last_words() -> None:
        for line in ("Shutting down", "Waiting for application shutdown.", "Application shutdown complete."):
            log.info("server.py:264", line)
        log.info("server.py:94", f"Finished server process [{os.getpid()}]")

    return _exit_later(delay, last_words, 0)


def _exit_later(seconds: float, last_words: Callable[[], None], code: int) -> threading.Timer:
    """After `seconds` (a daemon timer): log `last_words()`, flush, exit the process with `code`."""

    def run() -> None:
        last_words()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(seconds, run)
    timer.daemon = True
    timer.start()
    return timer


class EngineInitError(Exception):
    """A failure inside engine start-up; ``exception`` is the traceback's last line."""

    def __init__(
        self, exception: str, process: str = "EngineCore_DP0", log_lines: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(exception)
        self.exception = exception
        self.process = process
        self.log_lines = log_lines


def report_engine_failure(err: EngineInitError, api: VllmLog) -> int:
    """Print the failing process's error and the API server's generic line; return 1."""
    proc = VllmLog(err.process)
    for where, line in err.log_lines:
        proc.error(where, line)
    proc.raw(
        traceback_text(
            [("/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", 857, "run_engine_core")],
            err.exception,
        )
    )
    VllmLog("EngineCore_DP0").error("core.py:866", "EngineCore failed to start.")
    api.raw(
        traceback_text(
            [
                (
                    "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/utils.py",
                    933,
                    "wait_for_engine_startup",
                )
            ],
            ENGINE_FAILED,
        )
    )
    return 1


def validate_fail_mode(mode: str) -> float | None:
    """Check SIM_FAIL; return N for ``crash-after:N``."""
    if not mode:
        return None
    if mode.startswith("crash-after:"):
        try:
            return float(mode.split(":", 1)[1])
        except ValueError:
            pass
    elif mode in FAIL_MODES:
        return None
    raise ValueError(f"SIM_FAIL={mode!r} is not one of: {', '.join(FAIL_MODES)}")


def shm_bytes(path: str = "/dev/shm") -> int | None:
    """Size of the shared-memory filesystem, or None when there is none."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_frsize * stats.f_blocks


def nccl_shm_error(shm: int) -> EngineInitError:
    """NCCL's failure when /dev/shm is too small for tensor parallel buffers."""
    detail = (
        "Error while creating shared memory segment /dev/shm/nccl-vlQ8Xs "
        f"(size 9637888), error: No space left on device (28) [shm size {shm} bytes]"
    )
    return EngineInitError(
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO for "
        "details), NCCL version 2.27.3\nncclSystemError: System call (e.g. socket, malloc) or "
        f"external library call failed or device error. \nLast error:\n{detail}",
        process="Worker_TP0",
        log_lines=(("multiproc_executor.py:597", "WorkerProc failed to start."),),
    )


def hang_forever() -> None:
    """Stay 'loading' forever (never listen); SIGTERM still ends the process."""
    while True:
        time.sleep(3600)


def log_engine_dead(exception: str, log: VllmLog) -> None:
    """The lines vLLM prints when the engine core dies after start-up."""
    core = VllmLog("EngineCore_DP0")
    core.error("core.py:760", "EngineCore encountered a fatal error.")
    core.raw(
        traceback_text(
            [("/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", 751, "run_busy_loop")],
            exception,
        )
    )
    log.error("async_llm.py:480", "AsyncLLM output_handler failed.")
    log.raw(
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
        "See stack trace (above) for the root cause."
    )


def schedule_crash(seconds: float, log: VllmLog) -> threading.Timer:
    """Kill the server ``seconds`` real seconds after it became ready."""

    def last_words() -> None:
        log_engine_dead("RuntimeError: CUDA error: an illegal memory access was encountered", log)

    return _exit_later(seconds, last_words, 1)
