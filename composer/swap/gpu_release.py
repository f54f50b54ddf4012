"""Wait until GPU memory held by a stopped container is released (bounded)."""

from __future__ import annotations

import time
from collections.abc import Callable

RELEASED_FRACTION = 0.05
INTERVAL = 0.25


def wait_for_release(
    gpus: tuple[str, ...] | None, timeout: float, waiting: Callable[[str], None]
) -> str | None:
    """Poll the GPU probe until the stack's GPUs hold almost no memory.

    Returns a note when the wait was skipped or gave up; None when memory was released.
    """
    if gpus is None:
        return "no GPUs configured: GPU release wait skipped"
    from composer.errors import ComposerError
    from composer.probes.gpu import detect_probe

    probe = detect_probe()
    began = time.monotonic()
    while True:
        try:
            infos = probe.gpus()
        except ComposerError as err:
            return f"GPU probe failed ({err}): GPU release wait skipped"
        if not infos:
            return "no GPU probe (NVML or nvidia-smi) available: GPU release wait skipped"
        wanted = [g for g in infos if gpus == ("all",) or str(g.index) in gpus]
        busy = [g for g in wanted if g.total_bytes and g.used_bytes > RELEASED_FRACTION * g.total_bytes]
        if not busy:
            return None
        elapsed = time.monotonic() - began
        if elapsed >= timeout:
            held = ", ".join(f"GPU {g.index}: {g.used_bytes / 2**30:.1f} GiB" for g in busy)
            return f"GPU memory still in use after {timeout:.0f}s ({held}); starting anyway"
        waiting(f"waiting for GPU memory to be released ({elapsed:.1f}s)")
        time.sleep(INTERVAL)
