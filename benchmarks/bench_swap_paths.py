"""`up` of two checkouts side by side on the simulator: wall time, steps and `docker exec` calls.

Run: python3 benchmarks/bench_swap_paths.py --before /path/to/other/checkout [--rounds 3]

For each mode (a cold switch in stop standby, a wake switch in sleep standby) and each
checkout, one isolated project (own port and state) switches baseline <-> mtp; rounds
alternate between the checkouts so load drifts hit both alike. Per switch: the wall
time of `compose-spec up`, the client-visible hold (the longest round trip of a client
sending 1-token completions every 50 ms through the gateway), and the `docker exec` calls on the gateway (Docker's `exec_create`
events). Prints medians and the after/before ratios. Needs Docker and the simulator images.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Project:
    """One checkout's isolated project on the simulator."""

    def __init__(self, checkout: Path, standby: str) -> None:
        self.checkout = checkout
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-paths-"))
        self.project = f"benchpath{secrets.token_hex(3)}"
        extra = self.tmp / "stack.toml"
        self.port = free_port()
        extra.write_text(
            f'[stack]\nproject = "{self.project}"\nport = {self.port}\nstandby = "{standby}"\n'
            '[stack.env]\nSIM_LOAD_SECONDS = "0.3"\nSIM_TIME_SCALE = "20"\n',
            encoding="utf-8",
        )
        self.env = dict(
            os.environ,
            VLLM_API_KEY=secrets.token_urlsafe(24),
            XDG_STATE_HOME=str(self.tmp),
            PYTHONPATH=str(checkout),
        )
        self.base = [
            sys.executable, "-m", "composer", "--env-file", str(REPO / ".env.demo"),
            "--stack", str(REPO / "composer.toml"), "--stack", str(extra),
        ]  # fmt: skip

    def up(self, variant: str) -> tuple[float, dict]:
        began = time.monotonic()
        done = subprocess.run(
            [*self.base, "up", variant, "--json"],
            env=self.env,
            cwd=self.checkout,
            capture_output=True,
            text=True,
        )
        took = time.monotonic() - began
        if done.returncode != 0:
            raise SystemExit(f"{self.checkout}: up {variant} failed: {done.stderr[-500:]}")
        return took, json.loads(done.stdout.strip().splitlines()[-1])

    def cleanup(self) -> None:
        subprocess.run(["docker", "compose", "-p", self.project, "down"], capture_output=True, check=False)
        for name in ("vllm-baseline", "vllm-mtp"):
            subprocess.run(
                ["docker", "rm", "-f", f"{self.project}-{name}-1"], capture_output=True, check=False
            )


def exec_calls(client, container: str, since: float, until: float) -> int:
    events = client.events(
        since=int(since),
        until=int(until) + 1,
        filters={"container": container, "event": "exec_create"},
        decode=True,
    )
    return sum(1 for e in events if since <= e.get("timeNano", 0) / 1e9 <= until)


def _client(project: Project, stop: threading.Event, waits: list[float]) -> None:
    """1-token completions every 50 ms through the gateway; each one's round trip."""
    served = json.loads(
        subprocess.run(
            [*project.base, "status", "--json"],
            env=project.env,
            cwd=project.checkout,
            capture_output=True,
            text=True,
        ).stdout
    )["served_model_name"]
    url = f"http://127.0.0.1:{project.port}/v1/completions"
    body = {"model": served, "prompt": "x", "max_tokens": 1}
    headers = {"Authorization": f"Bearer {project.env['VLLM_API_KEY']}"}
    with httpx.Client(timeout=120, trust_env=False) as http:
        while not stop.is_set():
            began = time.monotonic()
            with contextlib.suppress(httpx.HTTPError):
                http.post(url, json=body, headers=headers)
            waits.append(time.monotonic() - began)
            stop.wait(0.05)


def measure(client, project: Project, variant: str) -> dict[str, float]:
    waits: list[float] = []
    stop = threading.Event()
    sender = threading.Thread(target=_client, args=(project, stop, waits), daemon=True)
    sender.start()
    time.sleep(0.5)
    since = time.time()
    took, result = project.up(variant)
    until = time.time()
    stop.set()
    sender.join()
    return {
        "up_s": took,
        "hold_s": max(waits, default=float("nan")),
        "execs": float(exec_calls(client, f"{project.project}-gateway-1", since, until)),
        "outcome": result.get("outcome"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, type=Path, help="the other checkout (the baseline)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import docker

    client = docker.from_env()
    checkouts = {"before": args.before.resolve(), "after": REPO}
    for mode in ("stop", "sleep"):
        projects = {name: Project(path, mode) for name, path in checkouts.items()}
        rows: dict[str, list[dict]] = {name: [] for name in projects}
        try:
            for project in projects.values():  # both variants loaded once (sleep: both exist)
                project.up("baseline")
                project.up("mtp")
            for index in range(args.rounds * 2):
                variant = "baseline" if index % 2 == 0 else "mtp"
                for name, project in projects.items():
                    rows[name].append(measure(client, project, variant))
        finally:
            for project in projects.values():
                project.cleanup()
        print(f"\n{mode} standby ({args.rounds * 2} switches each, medians)")
        print(f"{'':8}{'up s':>8}{'hold s':>8}{'execs':>7}  outcomes")
        medians = {}
        for name, measured in rows.items():
            medians[name] = {
                k: statistics.median(r[k] for r in measured) for k in ("up_s", "hold_s", "execs")
            }
            outcomes = sorted({str(r["outcome"]) for r in measured})
            m = medians[name]
            print(f"{name:8}{m['up_s']:8.2f}{m['hold_s']:8.2f}{m['execs']:7.0f}  {','.join(outcomes)}")
        ratio = {
            k: medians["after"][k] / medians["before"][k] if medians["before"][k] else float("nan")
            for k in medians["after"]
        }
        print(f"{'ratio':8}{ratio['up_s']:8.2f}{ratio['hold_s']:8.2f}{ratio['execs']:7.2f}  (after / before)")


if __name__ == "__main__":
    main()
