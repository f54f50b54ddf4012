#!/usr/bin/env python3
"""Wall time of `make check`'s steps (lint, the docs build, the fast test tier), and of the
fast tier run serially beside it as the baseline: the ratio says what the parallel run buys.

The fast tier is every test that needs no Docker engine, no image build and no long
end-to-end run (`pytest -m "not docker and not slow"`): make check runs it in parallel with
the `fast` Hypothesis profile, except the real-time checks of the simulator's timing
(`timing`), which run alone after it; the pytest commands are read from the Makefile's
check target. Target: the whole check under 180 s on the 2-core reference machine. The
daemon is hidden (DOCKER_HOST points at a missing socket), so a test that needs it fails
here. Each step's figure comes with the 1-minute load average before and after it: the
machine's own speed only where that stayed near 0. Not collected by pytest (bench_*.py). Usage:

    python benchmarks/bench_check.py [--workers N] [--no-baseline] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TARGET_S = 180.0


def _env() -> dict[str, str]:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    env["DOCKER_HOST"] = f"unix://{tempfile.gettempdir()}/bench-check-no-docker.sock"
    return env


def _check_pytest(workers: int) -> list[list[str]]:
    """make check's pytest commands as argv lists, from the Makefile (the fast tier's marker
    expression, the workers, the Hypothesis profile), with this interpreter's pytest."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    fast = re.search(r"^FAST_TIER := (.+)$", makefile, re.MULTILINE)
    if fast is None:
        raise SystemExit("the Makefile defines no FAST_TIER")
    recipe = makefile.split("\ncheck:", 1)[1].split("\n\n", 1)[0]
    values = {"FAST_TIER": fast.group(1), "CHECK_WORKERS": str(workers), "PYTEST_ARGS": ""}
    commands = []
    for line in recipe.splitlines():
        if "$(CHECK_PYTEST)" not in line:
            continue
        line = re.sub(r"\$\((\w+)\)", lambda m: values.get(m.group(1), m.group(0)), line)
        args = shlex.split(line.split("$(CHECK_PYTEST)", 1)[1])
        commands.append([str(BIN / "pytest"), "-q", "-p", "no:cacheprovider", *args])
    return commands


LOADS: dict[str, tuple[float, float]] = {}  # each step's 1-minute load average, before and after


def _timed(name: str, argv: list[str]) -> float:
    before = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=1800)
    elapsed = time.perf_counter() - start
    LOADS[name] = (before, os.getloadavg()[0])
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise SystemExit(f"{name} failed ({done.returncode}):\n" + "\n".join(tail))
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="default: the Makefile's CHECK_WORKERS")
    parser.add_argument("--no-baseline", action="store_true", help="skip the serial run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.workers is None:
        found = re.search(
            r"^CHECK_WORKERS \?= (\d+)$", (REPO / "Makefile").read_text(encoding="utf-8"), re.MULTILINE
        )
        args.workers = int(found.group(1)) if found else 4
    parallel_argv, timing_argv = _check_pytest(args.workers)
    steps = {
        "ruff check": [str(BIN / "ruff"), "check", "."],
        "ruff format": [
            str(BIN / "ruff"),
            "format",
            "--check",
            "composer",
            "tests",
            "benchmarks",
            "images/sim/src",
            "docs/hooks",
        ],
    }
    if (REPO / "mkdocs.yml").exists():
        site = Path(tempfile.mkdtemp(prefix="bench-check-site-"))
        steps["mkdocs build"] = [str(BIN / "mkdocs"), "build", "--strict", "--quiet", "--site-dir", str(site)]
    parallel = f"fast tier (-n {args.workers})"
    steps[parallel] = parallel_argv
    steps["timing tests, alone"] = timing_argv
    times = {name: _timed(name, argv) for name, argv in steps.items()}
    total = sum(times.values())
    report: dict[str, object] = {
        "steps_s": times,
        "check_s": total,
        "target_s": TARGET_S,
        "cpus": os.cpu_count(),
        "load_before_after": LOADS,  # a figure is the machine's only where the load stayed near 0
    }
    if not args.no_baseline:
        fast = next(a for a in parallel_argv if a.endswith("and not timing")).removesuffix(" and not timing")
        serial_argv = [
            str(BIN / "pytest"),
            "-q",
            "-p",
            "no:cacheprovider",
            "--hypothesis-profile=fast",
            "-m",
            fast,
        ]
        serial = _timed("fast tier (serial)", serial_argv)
        report["fast_tier_serial_s"] = serial
        report["parallel_over_serial"] = (times[parallel] + times["timing tests, alone"]) / serial
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for name, seconds in times.items():
            before, after = LOADS[name]
            print(f"{name:24} {seconds:7.1f} s  (load {before:.2f} -> {after:.2f})")
        print(f"{'make check':24} {total:7.1f} s  (target < {TARGET_S:.0f} s on {os.cpu_count()} CPUs)")
        if "fast_tier_serial_s" in report:
            before, after = LOADS["fast tier (serial)"]
            print(
                f"{'fast tier (serial)':24} {report['fast_tier_serial_s']:7.1f} s  "
                f"(parallel/serial {report['parallel_over_serial']:.2f}; load {before:.2f} -> {after:.2f})"
            )
    return 0 if total < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
