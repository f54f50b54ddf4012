"""Swap overhead and ready-detection latency against the simulator, side by side.

Run: python3 benchmarks/bench_swap.py [--rounds 5]

- overhead: wall time of `compose-spec up B` with A running, minus the same steps done
  by hand (`docker compose stop` + `rm` of A, `docker compose up -d` of B, then a tight
  loop until B's /health answers 200), rounds alternating.
- detection: the first 200 from /health seen by a 10 ms loop vs the moment compose-spec
  reports B ready (its progress line), measured in-process.
- `docker compose up -d --wait` with the rendered healthcheck, for comparison.
Needs Docker, the simulator images (make image-sim) and nothing on the chosen port.
"""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(REPO))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Setup:
    """An isolated stack: own project, port, state dir."""

    def __init__(self, settle: float) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-swap-"))
        self.project = f"benchswap{secrets.token_hex(3)}"
        self.port = free_port()
        self.settle = settle
        extra = self.tmp / "stack.toml"
        extra.write_text(f'[stack]\nproject = "{self.project}"\nport = {self.port}\n')
        self.env = dict(os.environ, VLLM_API_KEY=secrets.token_urlsafe(24), XDG_STATE_HOME=str(self.tmp))
        self.base = [
            sys.executable, "-m", "composer", "--env-file", str(REPO / ".env.demo"),
            "--stack", str(REPO / "composer.toml"), "--stack", str(extra),
        ]  # fmt: skip

    def cs(self, *args: str) -> float:
        began = time.monotonic()
        subprocess.run([*self.base, *args], env=self.env, cwd=REPO, check=True, capture_output=True)
        return time.monotonic() - began

    def render(self, variant: str) -> Path:
        out = self.tmp / "rendered"
        subprocess.run([*self.base, "render", variant, "--out", str(out)], env=self.env, cwd=REPO, check=True)
        return out / f"{variant}.yml"

    def compose(self, file: Path, *args: str) -> None:
        subprocess.run(
            [
                "docker",
                "compose",
                "--env-file",
                str(REPO / ".env.demo"),
                "-p",
                self.project,
                "-f",
                str(file),
                *args,
            ],
            env=self.env,
            cwd=REPO,
            check=True,
            capture_output=True,
        )

    def wait_health(self, began: float) -> float:
        url = f"http://127.0.0.1:{self.port}/health"
        with httpx.Client(timeout=1.0) as client:
            while True:
                try:
                    if client.get(url).status_code == 200:
                        return time.monotonic() - began
                except httpx.TransportError:
                    pass
                time.sleep(0.01)

    def by_hand(self, a_file: Path, b_file: Path) -> float:
        self.compose(a_file, "up", "-d")
        self.wait_health(time.monotonic())
        began = time.monotonic()
        self.compose(a_file, "stop")
        self.compose(a_file, "rm", "-f")
        self.compose(b_file, "up", "-d")
        return self.wait_health(began)

    def with_tool(self, a: str, b: str) -> float:
        self.cs("up", a, "--settle", str(self.settle))
        return self.cs("up", b, "--settle", str(self.settle))

    def compose_wait(self, a_file: Path, b_file: Path) -> float:
        self.compose(a_file, "up", "-d")
        self.wait_health(time.monotonic())
        began = time.monotonic()
        self.compose(a_file, "stop")
        self.compose(a_file, "rm", "-f")
        self.compose(b_file, "up", "-d", "--wait")
        return time.monotonic() - began

    def cleanup(self) -> None:
        subprocess.run(["docker", "compose", "-p", self.project, "down"], capture_output=True, check=False)


def detection_latency(setup: Setup) -> float:
    """Seconds between a tight /health loop's first 200 and compose-spec reporting ready."""
    from composer.engine.client import docker_client
    from composer.stack.load import load_stack
    from composer.swap.entry import up_set as up
    from composer.swap.outcome import UpOptions

    os.environ.update(setup.env)
    stack = load_stack(
        [REPO / "composer.toml", setup.tmp / "stack.toml"], REPO / ".env.demo", environ=setup.env
    )
    client = docker_client()
    up(stack, ["baseline"], client=client, options=UpOptions(settle=0))
    first_200: list[float] = []
    reported: list[float] = []

    def on_progress(message: str) -> None:
        if " is ready (" in message and not reported:
            reported.append(time.monotonic())

    up(stack, ["mtp"], client=client, options=UpOptions(settle=0), progress=lambda m: None)
    thread = threading.Thread(target=lambda: first_200.append(_first_200(setup)))
    thread.start()
    up(stack, ["baseline"], client=client, options=UpOptions(settle=0), progress=on_progress)
    thread.join()
    return reported[0] - first_200[0]


def _first_200(setup: Setup) -> float:
    """The monotonic time of the first 200 after the current container goes away."""
    url = f"http://127.0.0.1:{setup.port}/health"
    with httpx.Client(timeout=1.0) as client:
        seen_down = False
        while True:
            try:
                ok = client.get(url).status_code == 200
            except httpx.TransportError:
                ok = False
            if not ok:
                seen_down = True
            elif seen_down:
                return time.monotonic()
            time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--settle", type=float, default=1.0)
    args = parser.parse_args()
    setup = Setup(args.settle)
    try:
        a_file, b_file = setup.render("baseline"), setup.render("mtp")
        hand, tool = [], []
        for _ in range(args.rounds):
            hand.append(setup.by_hand(a_file, b_file))
            setup.cleanup()
            tool.append(setup.with_tool("baseline", "mtp"))
            setup.cleanup()
        wait = setup.compose_wait(a_file, b_file)
        setup.cleanup()
        latencies = [detection_latency(setup) for _ in range(args.rounds)]
        setup.cleanup()
    finally:
        setup.cleanup()
    h, t = statistics.median(hand), statistics.median(tool)
    print(f"by hand (stop, rm, up -d, /health loop): median {h:.2f}s  {[round(x, 2) for x in hand]}")
    print(f"compose-spec up (settle {args.settle}s):        median {t:.2f}s  {[round(x, 2) for x in tool]}")
    print(f"overhead: {t - h:+.2f}s (includes the {args.settle}s settle watch); ratio {t / h:.2f}x")
    print(f"docker compose up -d --wait (rendered healthcheck): {wait:.2f}s")
    print(
        f"ready detection after the first /health 200: median {statistics.median(latencies) * 1000:.0f} ms"
        f"  {[round(x * 1000) for x in latencies]}"
    )


if __name__ == "__main__":
    main()
