"""`compose-spec bench --decide` itself on the simulator (Docker), in its non-hybrid and
hybrid settings: every arm swapped in through `up`, the switching arm measured through the
gateway with the automatic policy; both decision tables printed.

Run: python3 benchmarks/bench_decide_docker.py [--time-scale 10] [--runs 1] [--max-tokens 300]
     [--k 3,7] [--concurrency 1,2,4,8,16,32]

These are MODEL figures: the simulator's timing model (images/sim/README.md, "In-server
adaptive speculation"), with Docker, HTTP and swap overheads in real seconds on this
machine. The command exists to be run on a real GPU rig: `compose-spec bench --decide`.
Writes benchmarks/results/decide-<setting>/ (bench.json, decide.json, decide.png).
Needs Docker and the simulator and gateway images (make image-sim, make image-gateway).
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_setting(name: str, hybrid: bool, opts: argparse.Namespace) -> tuple[int, str]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-decide-"))
    project = f"benchdecide{secrets.token_hex(3)}"
    extra = tmp / "stack.toml"
    extra.write_text(
        f'[stack]\nproject = "{project}"\nport = {opts.port or free_port()}\n'
        f'[stack.env]\nSIM_TIME_SCALE = "{opts.time_scale}"\nSIM_LOAD_SECONDS = "0.3"\n'
        f'SIM_HYBRID_MODEL = "{1 if hybrid else 0}"\n',
        encoding="utf-8",
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SIM_", "COMPOSE_")) and k not in {"NUM_SPECULATIVE_TOKENS", "COMPOSER_STACK"}
    }
    env.update(VLLM_API_KEY=secrets.token_urlsafe(24), XDG_STATE_HOME=str(tmp / "state"))
    out = RESULTS / f"decide-{name}"
    argv = [
        sys.executable, "-m", "composer", "--env-file", str(REPO / ".env.demo"),
        "--stack", str(REPO / "composer.toml"), "--stack", str(extra),
        "bench", "--decide", "--k", opts.k, "--concurrency", opts.concurrency,
        "--runs", str(opts.runs), "--warmup", "0", "--max-tokens", str(opts.max_tokens),
        "--timeout", "300", "--out", str(out),
    ]  # fmt: skip
    print(f"== {name}: {' '.join(argv[2:])}", flush=True)
    done = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    table = done.stdout[done.stdout.find("workload ") :] if "workload " in done.stdout else done.stdout
    return done.returncode, f"== simulator, {name} setting (exit {done.returncode}) ==\n{table}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-scale", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=300)
    parser.add_argument("--k", default="3,7")
    parser.add_argument("--concurrency", default="1,2,4,8,16,32")
    parser.add_argument("--port", type=int, default=0)
    opts = parser.parse_args()
    tables, worst = [], 0
    for name, hybrid in (("non-hybrid", False), ("hybrid", True)):
        code, table = run_setting(name, hybrid, opts)
        tables.append(table)
        worst = max(worst, code)
    print("\n\n".join(tables))
    print("(simulator model figures, not GPU measurements: run `compose-spec bench --decide` on a GPU rig)")
    return worst


if __name__ == "__main__":
    sys.exit(main())
