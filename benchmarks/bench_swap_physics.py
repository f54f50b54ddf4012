"""The swap's critical path against the physics it waits on, on the simulator.

Run: python3 benchmarks/bench_swap_physics.py [--rounds 4]
     (PYTHONPATH=/other/checkout python3 benchmarks/bench_swap_physics.py for another checkout)

- Wake switch (sleep standby, baseline <-> mtp): the client-visible hold (the longest round
  trip of a client sending 1-token completions every 50 ms through the gateway: the first
  held request, from its send to its release) against the sum of the simulator's own sleep
  and wake times for that switch (its log: "It took X seconds to fall asleep / wake up").
  Target: hold <= sum + 0.5 s.
- Cold switch (stop standby): `up` against the same steps by hand, side by side: `docker
  compose rm -sf` of the serving service, `docker compose up -d` from the same run file, then
  one completion through the gateway (held until the new variant answers). Both contain the
  simulator's load; the difference is `up`'s own cost. Target: <= +0.3 s.
  `over_less_settle_s` is that difference less `up`'s settle watch (1 s after readiness: the
  window in which a crash still rolls back), which the steps by hand lack; `--settle 0`
  measures the cold switch without that window, like for like with the steps by hand.
- Per swap: Docker API calls (every HTTP call of the SDK, `docker compose` not included) and
  `docker exec` calls, recorded at the SDK's HTTP layer.

The gateway image is the stack's (`GATEWAY_IMAGE` overrides it): its control session's
speed is part of the wake's hold. `up` runs in process (`composer.swap.entry.up_set`, what
`compose-spec up` calls) so its calls can be counted; the process start of the CLI (about
0.3 s here) is not in these figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx

import composer

REPO = Path(composer.__file__).resolve().parents[1]
SLEPT = re.compile(r"It took ([0-9.]+) seconds to fall asleep")
WOKE = re.compile(r"It took ([0-9.]+) seconds to wake up")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Calls:
    """Docker API calls and execs made through the SDK while `counting` is set."""

    def __init__(self) -> None:
        self.api = 0
        self.execs = 0
        self.counting = False
        from docker.api.client import APIClient

        for verb in ("_get", "_post", "_delete", "_put"):
            original = getattr(APIClient, verb)

            def recorded(client, url, *args, _original=original, **kwargs):
                if self.counting:
                    self.api += 1
                    self.execs += url.endswith("/exec")
                return _original(client, url, *args, **kwargs)

            setattr(APIClient, verb, recorded)


class Project:
    """One isolated project (own port, state and key) on the simulator."""

    def __init__(self, standby: str, settle: float = 1.0) -> None:
        self.settle = settle
        from composer.stack.load import load_stack

        self.tmp = Path(tempfile.mkdtemp(prefix="bench-physics-"))
        self.project = f"benchphys{secrets.token_hex(3)}"
        self.port = free_port()
        extra = self.tmp / "stack.toml"
        extra.write_text(
            f'[stack]\nproject = "{self.project}"\nport = {self.port}\nstandby = "{standby}"\n'
            '[stack.env]\nSIM_LOAD_SECONDS = "0.3"\nSIM_TIME_SCALE = "20"\n',
            encoding="utf-8",
        )
        self.key = secrets.token_urlsafe(24)
        os.environ.update(VLLM_API_KEY=self.key, XDG_STATE_HOME=str(self.tmp))
        self.env = dict(os.environ)
        self.stack = load_stack([REPO / "composer.toml", extra], REPO / ".env.demo", environ=self.env)

    def up(self, client, variant: str) -> tuple[float, object]:
        from composer.swap.entry import up_set
        from composer.swap.outcome import UpOptions

        os.environ.update(VLLM_API_KEY=self.key, XDG_STATE_HOME=str(self.tmp))
        began = time.monotonic()
        result = up_set(
            self.stack,
            [variant],
            client=client,
            options=UpOptions(settle=self.settle),
        )
        return time.monotonic() - began, result

    def complete(self, http: httpx.Client) -> int:
        body = {"model": self.stack.served_model_name, "prompt": "x", "max_tokens": 1}
        reply = http.post(
            f"http://127.0.0.1:{self.port}/v1/completions",
            json=body,
            headers={"Authorization": f"Bearer {self.key}"},
        )
        return reply.status_code

    def cleanup(self) -> None:
        subprocess.run(["docker", "compose", "-p", self.project, "down"], capture_output=True, check=False)
        for name in ("vllm-baseline", "vllm-mtp"):
            subprocess.run(
                ["docker", "rm", "-f", f"{self.project}-{name}-1"], capture_output=True, check=False
            )


def _client(project: Project, stop: threading.Event, waits: list[float]) -> None:
    with httpx.Client(timeout=120, trust_env=False) as http:
        while not stop.is_set():
            began = time.monotonic()
            with contextlib.suppress(httpx.HTTPError):
                project.complete(http)
            waits.append(time.monotonic() - began)
            stop.wait(0.05)


def _logs(client, project: Project) -> dict[str, str]:
    found = {}
    for name in ("vllm-baseline", "vllm-mtp"):
        with contextlib.suppress(Exception):
            container = client.containers.get(f"{project.project}-{name}-1")
            found[name] = container.logs().decode(errors="replace")
    return found


def _sim_seconds(before: dict[str, str], after: dict[str, str]) -> float:
    """The simulator's own sleep and wake seconds logged between two reads of the logs."""
    total = 0.0
    for name, text in after.items():
        new = text[len(before.get(name, "")) :]
        total += sum(float(m.group(1)) for m in (*SLEPT.finditer(new), *WOKE.finditer(new)))
    return total


def wake_rounds(client, calls: Calls, rounds: int) -> list[dict[str, float]]:
    project = Project("sleep")
    rows = []
    try:
        project.up(client, "baseline")
        project.up(client, "mtp")
        for index in range(rounds):
            variant = "baseline" if index % 2 == 0 else "mtp"
            waits: list[float] = []
            stop = threading.Event()
            sender = threading.Thread(target=_client, args=(project, stop, waits), daemon=True)
            sender.start()
            time.sleep(0.5)
            logs = _logs(client, project)
            calls.api = calls.execs = 0
            calls.counting = True
            took, result = project.up(client, variant)
            calls.counting = False
            time.sleep(0.3)
            stop.set()
            sender.join()
            physics = _sim_seconds(logs, _logs(client, project))
            hold = max(waits, default=float("nan"))
            rows.append(
                {
                    "up_s": took,
                    "hold_s": hold,
                    "sleep_wake_s": physics,
                    "over_s": hold - physics,
                    "api": calls.api,
                    "execs": calls.execs,
                    "outcome": result.outcome,  # type: ignore[attr-defined]
                    "timings": result.timings,  # type: ignore[attr-defined]
                }
            )
    finally:
        project.cleanup()
    return rows


def cold_rounds(client, calls: Calls, rounds: int, settle: float = 1.0) -> list[dict[str, float]]:
    from composer.render.files import run_file
    from composer.render.runfiles import compose_environment
    from composer.render.target import resolve_target

    project = Project("stop", settle)
    rows = []
    try:
        project.up(client, "baseline")
        with httpx.Client(timeout=300, trust_env=False) as http:
            for _ in range(rounds):  # up baseline -> mtp, then mtp -> baseline by hand
                variant = "mtp"
                calls.api = calls.execs = 0
                calls.counting = True
                took, result = project.up(client, variant)
                calls.counting = False
                assert project.complete(http) == 200
                # the same switch by hand, back again: rm the service, up -d, one request
                other = "baseline" if variant == "mtp" else "mtp"
                target = resolve_target(project.stack, other)
                compose_file = run_file(target)
                env = compose_environment(compose_file, project.key)
                base = ["docker", "compose", "-p", project.project, "-f", str(compose_file)]
                began = time.monotonic()
                subprocess.run(
                    [*base, "rm", "-sf", project.stack.service], env=env, check=True, capture_output=True
                )
                subprocess.run(
                    [*base, "up", "-d", "--no-build", "--pull", "never", project.stack.service],
                    env=env,
                    check=True,
                    capture_output=True,
                )
                status = project.complete(http)
                by_hand = time.monotonic() - began
                rows.append(
                    {
                        "up_s": took,
                        "by_hand_s": by_hand,
                        "over_s": took - by_hand,
                        # the settle watch (`--settle`, 1 s) is a safety window by hand has not
                        "over_less_settle_s": took - by_hand - result.timings.get("settle", 0.0),  # type: ignore[attr-defined]
                        "api": calls.api,
                        "execs": calls.execs,
                        "by_hand_status": status,
                        "outcome": result.outcome,  # type: ignore[attr-defined]
                        "timings": result.timings,  # type: ignore[attr-defined]
                    }
                )
    finally:
        project.cleanup()
    return rows


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(float(r[key]) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="print every row as JSON too")
    parser.add_argument(
        "--settle",
        type=float,
        default=1.0,
        help="the cold switch's settle watch (s); 0 measures up against by hand without it",
    )
    args = parser.parse_args()
    import docker

    client = docker.from_env()
    calls = Calls()
    wake = wake_rounds(client, calls, args.rounds)
    cold = cold_rounds(client, calls, args.rounds, args.settle)
    print(f"checkout: {REPO}")
    print(f"wake switch ({len(wake)} switches, medians)")
    for key in ("up_s", "hold_s", "sleep_wake_s", "over_s", "api", "execs"):
        print(f"  {key:14}{_median(wake, key):8.2f}")
    print(f"  target: hold <= sleep+wake + 0.5 s -> {'met' if _median(wake, 'over_s') <= 0.5 else 'not met'}")
    print(f"cold switch ({len(cold)} switches, settle watch {args.settle:g} s, medians)")
    for key in ("up_s", "by_hand_s", "over_s", "over_less_settle_s", "api", "execs"):
        print(f"  {key:14}{_median(cold, key):8.2f}")
    print(f"  target: up <= by hand + 0.3 s -> {'met' if _median(cold, 'over_s') <= 0.3 else 'not met'}")
    if args.json:
        print(json.dumps({"wake": wake, "cold": cold}, indent=1, default=str))


if __name__ == "__main__":
    main()
