"""Cold switch vs wake switch with sleep standby, side by side, on the simulator.

Run: python3 benchmarks/bench_standby.py [--rounds 2] [--cold-start 100] [--time-scale 10]

Every variant gets `standby = "sleep"`. The first mtp -> baseline pair are cold starts
(the simulator loads for `--cold-start` simulated seconds, divided by `--time-scale`);
each switch after them wakes the sleeping variant. Reported per switch: the outcome, the
wall time of `compose-spec up`, and its own timings (start_to_ready for a start, wake
for a wake); then the median cold and wake switch and their ratio. Simulated seconds are
real seconds times the time scale; Docker and `docker exec` overheads are real seconds.
Needs Docker and the simulator images (make image-sim).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=2, help="mtp -> baseline wake pairs after the cold pair"
    )
    parser.add_argument("--cold-start", type=float, default=100.0, help="simulated cold start, seconds")
    parser.add_argument("--time-scale", type=float, default=10.0, help="SIM_TIME_SCALE")
    opts = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-standby-"))
    project = f"benchstandby{secrets.token_hex(3)}"
    extra = tmp / "stack.toml"
    extra.write_text(
        f'[stack]\nproject = "{project}"\nport = {free_port()}\nstandby = "sleep"\n'
        f'[stack.env]\nSIM_COLD_START_SECONDS = "{opts.cold_start}"\nSIM_TIME_SCALE = "{opts.time_scale}"\n',
        encoding="utf-8",
    )
    env = dict(os.environ, VLLM_API_KEY=secrets.token_urlsafe(24), XDG_STATE_HOME=str(tmp))
    base = [
        sys.executable, "-m", "composer", "--env-file", str(REPO / ".env.demo"),
        "--stack", str(REPO / "composer.toml"), "--stack", str(extra),
    ]  # fmt: skip
    rows: list[tuple[str, str, float, float]] = []
    try:
        for variant in ["mtp", "baseline"] * (1 + opts.rounds):
            began = time.monotonic()
            done = subprocess.run(
                [*base, "up", variant, "--json"], env=env, cwd=REPO, capture_output=True, text=True
            )
            took = time.monotonic() - began
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                return 1
            result = json.loads(done.stdout.strip().splitlines()[-1])
            timings = result["timings"]
            ready = timings.get("wake", timings.get("start_to_ready", 0.0))
            rows.append((variant, result["outcome"], took, ready))
    finally:
        subprocess.run([*base, "down"], env=env, cwd=REPO, capture_output=True)
    print(f"{'switch to':<10} {'outcome':<8} {'up (s)':>8} {'to ready (s)':>13}")
    for variant, outcome, took, ready in rows:
        print(f"{variant:<10} {outcome:<8} {took:>8.2f} {ready:>13.2f}")
    cold = [r for r in rows if r[1] != "woke"]
    woke = [r for r in rows if r[1] == "woke"]
    if not woke:
        print("no switch woke a sleeping variant", file=sys.stderr)
        return 1
    cold_up, wake_up = statistics.median(r[2] for r in cold), statistics.median(r[2] for r in woke)
    cold_ready, wake_ready = statistics.median(r[3] for r in cold), statistics.median(r[3] for r in woke)
    print(
        f"median switch: cold {cold_up:.2f} s, wake {wake_up:.2f} s, ratio {cold_up / wake_up:.1f}x; "
        f"to ready: cold {cold_ready:.2f} s, wake {wake_ready:.2f} s, ratio {cold_ready / wake_ready:.1f}x "
        f"(time scale {opts.time_scale:g}: simulated cold start {opts.cold_start:g} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
