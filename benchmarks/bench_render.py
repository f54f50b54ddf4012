#!/usr/bin/env python3
"""Wall time of `compose-spec render` and `compose-spec config` against
`docker compose -f compose/mtp.yml config` on the same machine.

Each round runs the three commands once, alternately, so drift affects all alike;
the report is the median of ROUNDS rounds and each command's ratio to docker compose.
Target: ratio <= 3. Not collected by pytest (bench_*.py). Usage:

    python benchmarks/bench_render.py [--rounds 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_RATIO = 3.0


def _clean_env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "TMPDIR", "DOCKER_HOST", "DOCKER_CONFIG")
    return {k: os.environ[k] for k in keep if k in os.environ}


def _timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    # This environment's entry point (next to its interpreter), never one found on PATH.
    compose_spec = str(Path(sys.executable).with_name("compose-spec"))
    if not Path(compose_spec).exists():
        sys.exit(f"{compose_spec} is missing: run `make install`")
    env = _clean_env()
    with tempfile.TemporaryDirectory(prefix="bench-render-") as tmp:
        empty_env = Path(tmp, "empty.env")
        empty_env.write_text("")
        sample_env = Path(tmp, "sample.env")
        sample_env.write_text("VLLM_API_KEY=sk-bench-0123456789abcdef\n")
        commands = {
            "docker compose config": [
                "docker",
                "compose",
                "--env-file",
                str(sample_env),
                "-f",
                "compose/mtp.yml",
                "config",
            ],
            "compose-spec render": [],  # a fresh output directory each round
            "compose-spec config": [compose_spec, "--env-file", str(empty_env), "config"],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for round_number in range(args.rounds + 1):  # round 0 warms caches and is dropped
            out = Path(tmp, f"out{round_number}")
            commands["compose-spec render"] = [
                compose_spec,
                "--env-file",
                str(empty_env),
                "render",
                "--out",
                str(out),
            ]
            for name, argv in commands.items():
                elapsed = _timed(argv, env)
                if round_number:
                    times[name].append(elapsed)
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians["docker compose config"]
    report = {
        name: {"median_s": round(m, 4), "ratio": round(m / base, 2), "runs": len(times[name])}
        for name, m in medians.items()
    }
    worst = max(v["ratio"] for k, v in report.items() if k != "docker compose config")
    if args.json:
        print(
            json.dumps(
                {"results": report, "target_ratio": TARGET_RATIO, "ok": worst <= TARGET_RATIO}, indent=2
            )
        )
    else:
        print(f"{'command':<24} {'median':>9} {'ratio':>6}  ({args.rounds} alternating rounds)")
        for name, row in report.items():
            print(f"{name:<24} {row['median_s'] * 1000:>7.1f}ms {row['ratio']:>5.2f}x")
        print(
            f"target <= {TARGET_RATIO:.0f}x: {'met' if worst <= TARGET_RATIO else 'MISSED'} (worst {worst:.2f}x)"
        )
    return 0 if worst <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
