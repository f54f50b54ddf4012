"""The GPU release wait on a real NVIDIA GPU, and host<->GPU copy rates (pinned vs pageable).

Needs PyTorch with CUDA and NVML (`nvidia-ml-py`); no Docker. What it does:

1. A "foreign" process takes `--foreign-gib` of GPU 0 and keeps it for the whole run.
2. For each accounting mode, a "container-like" process takes `--container-gib`; the
   release wait's snapshot is taken (`ReleaseWait.snapshot`, the project's NVML probe), the
   holder gets SIGTERM (what `docker stop` sends), and the wait starts when it has exited,
   as in a swap. Reported: how long the wait took after the holder's exit, how it ended,
   and (from a 5 ms NVML sampler) when the GPU's used memory actually dropped.
   Modes: `per-process` (the holder's PID, as found through the container's cgroup),
   `snapshot drop` (no PIDs: the drop against the snapshot), `budget` (no PIDs and the drop
   rule disabled: only the next variant's budget, `--budget-gib`, being free ends it).
3. The old rule (every GPU below 5% used) on the same GPU while the foreign process keeps
   its memory, bounded by `--old-timeout`.
4. Host-to-GPU and GPU-to-host copy rates of `--copy-gib` sizes from pinned and pageable
   host memory (the best and the median of `--repeats` copies).

    python3 benchmarks/gpu_release_probe.py --out results/      # writes gpu_release.json

Run it where `composer` imports (`make install`, or `PYTHONPATH=.` in the repository root).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from composer.probes.gpu import GpuInfo, detect_probe, select_gpus
from composer.swap import gpu_release
from composer.swap.gpu_release import ReleaseWait

GIB = 1 << 30
OLD_RELEASED_FRACTION = 0.05


def hold(gib: float) -> None:
    """Child mode: take `gib` of GPU 0 (cudaMalloc through PyTorch), say ready, sleep."""
    import torch

    block = torch.empty(int(gib * GIB), dtype=torch.uint8, device="cuda:0")
    block.fill_(1)
    torch.cuda.synchronize()
    print("ready", flush=True)
    while True:
        time.sleep(3600)


def start_holder(gib: float) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, __file__, "hold", str(gib)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if line != "ready":
        child.kill()
        raise SystemExit(f"the {gib} GiB holder did not start (said {line!r})")
    return child


class UsedSampler(threading.Thread):
    """Samples GPU 0's used memory through NVML every 5 ms (monotonic time, bytes)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.samples: list[tuple[float, int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            used = int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
            self.samples.append((time.monotonic(), used))
            time.sleep(0.005)

    def first_below(self, after: float, limit: int) -> float | None:
        return next((t for t, used in self.samples if t >= after and used <= limit), None)


def gpu0(probe) -> GpuInfo:
    return select_gpus(probe.gpus(), ["0"])[0]


def one_release(probe, mode: str, args: argparse.Namespace, sampler: UsedSampler) -> dict:
    holder = start_holder(args.container_gib)
    time.sleep(0.5)
    before = gpu0(probe)
    pids = frozenset({holder.pid}) if mode == "per-process" else frozenset()
    budget = (lambda gpus: {0: int(args.budget_gib * GIB)}) if mode == "budget" else None
    floor = gpu_release.DROP_FLOOR
    if mode == "budget":
        gpu_release.DROP_FLOOR = 1 << 60  # the drop rule can never pass: only the budget ends it
    try:
        release = ReleaseWait.snapshot(probe, ("0",), pids, budget)
        t_signal = time.monotonic()
        holder.send_signal(signal.SIGTERM)
        holder.wait()
        t_exit = time.monotonic()
        outcome = release.wait(args.timeout)
        t_done = time.monotonic()
    finally:
        gpu_release.DROP_FLOOR = floor
    after = gpu0(probe)
    limit = before.used_bytes - int(args.container_gib * GIB * 0.9)
    dropped = sampler.first_below(t_signal, limit)
    listed = [(p.pid, p.used_bytes) for p in before.processes]
    return {
        "mode": mode,
        "accounting": release.accounting,
        "outcome": outcome.how,
        "note": outcome.note,
        "wait_after_exit_s": round(t_done - t_exit, 4),
        "exit_after_signal_s": round(t_exit - t_signal, 4),
        "memory_dropped_after_exit_s": round(dropped - t_exit, 4) if dropped else None,
        "used_before_gib": round(before.used_bytes / GIB, 2),
        "used_after_gib": round(after.used_bytes / GIB, 2),
        "processes_listed_before": listed,
        "holder_pid": holder.pid,
    }


def old_rule_wait(probe, timeout: float) -> dict:
    """The rule the release wait used before: every GPU below 5% used, else run to the timeout."""
    began = time.monotonic()
    while True:
        gpu = gpu0(probe)
        busy = gpu.total_bytes and gpu.used_bytes > OLD_RELEASED_FRACTION * gpu.total_bytes
        elapsed = time.monotonic() - began
        if not busy:
            return {"outcome": "released", "seconds": round(elapsed, 3), "used_gib": gpu.used_bytes / GIB}
        if elapsed >= timeout:
            return {
                "outcome": "timeout",
                "seconds": round(elapsed, 3),
                "used_gib": round(gpu.used_bytes / GIB, 2),
                "used_fraction": round(gpu.used_bytes / gpu.total_bytes, 4),
            }
        time.sleep(0.25)


def copy_rates(sizes: list[float], repeats: int) -> list[dict]:
    """GB/s (10^9 bytes/s) host->GPU and GPU->host, pinned and pageable host buffers."""
    import torch

    rows = []
    for gib in sizes:
        n = int(gib * GIB)
        device = torch.empty(n, dtype=torch.uint8, device="cuda:0")
        device.fill_(2)
        for kind in ("pinned", "pageable"):
            host = torch.empty(n, dtype=torch.uint8, pin_memory=(kind == "pinned"))
            host.fill_(1)  # touch every page before timing
            for direction in ("host_to_gpu", "gpu_to_host"):
                dst, src = (device, host) if direction == "host_to_gpu" else (host, device)
                dst.copy_(src)  # warm-up
                torch.cuda.synchronize()
                times = []
                for _ in range(repeats):
                    began = time.perf_counter()
                    dst.copy_(src)
                    torch.cuda.synchronize()
                    times.append(time.perf_counter() - began)
                rows.append(
                    {
                        "gib": gib,
                        "host_memory": kind,
                        "direction": direction,
                        "best_s": round(min(times), 4),
                        "median_s": round(statistics.median(times), 4),
                        "best_gb_per_s": round(n / min(times) / 1e9, 2),
                        "median_gb_per_s": round(n / statistics.median(times) / 1e9, 2),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
            del host
        del device
        torch.cuda.empty_cache()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--foreign-gib", type=float, default=10)
    parser.add_argument("--container-gib", type=float, default=60)
    parser.add_argument("--budget-gib", type=float, default=100)
    parser.add_argument("--timeout", type=float, default=20, help="the new wait's bound")
    parser.add_argument("--old-timeout", type=float, default=10, help="the old rule's bound")
    parser.add_argument("--copy-gib", default="1,4,8", help="comma-separated sizes; empty to skip")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--modes", default="per-process,snapshot drop,budget")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()

    import torch

    probe = detect_probe()
    report: dict = {
        "probe": probe.name,
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "interval_s": gpu_release.INTERVAL,
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    print(f"probe {probe.name}; {report['device']}", flush=True)
    sampler = UsedSampler()
    sampler.start()
    foreign = start_holder(args.foreign_gib)
    try:
        report["idle_with_foreign"] = {
            "used_gib": round(gpu0(probe).used_bytes / GIB, 2),
            "total_gib": round(gpu0(probe).total_bytes / GIB, 2),
            "processes": [(p.pid, p.name, p.used_bytes) for p in gpu0(probe).processes],
            "foreign_pid": foreign.pid,
        }
        print(json.dumps(report["idle_with_foreign"]), flush=True)
        report["release"] = []
        for mode in [m for m in args.modes.split(",") if m]:
            row = one_release(probe, mode, args, sampler)
            report["release"].append(row)
            print(json.dumps(row), flush=True)
        report["old_rule"] = old_rule_wait(probe, args.old_timeout)
        print("old rule:", json.dumps(report["old_rule"]), flush=True)
    finally:
        foreign.kill()
        foreign.wait()
        sampler.stopping.set()
    sizes = [float(s) for s in args.copy_gib.split(",") if s]
    report["copy"] = copy_rates(sizes, args.repeats) if sizes else []
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_release.json").write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out / 'gpu_release.json'}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "hold":
        hold(float(sys.argv[2]))
    else:
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        main()
