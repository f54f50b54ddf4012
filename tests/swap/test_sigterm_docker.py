"""SIGTERM to `up`, `bench`, `bench --decide` and `follow` mid-work, on the real daemon with the
simulator: each undoes what it started and exits (130, like a shell) within 5 s of that undo,
and the variant that served before serves through the port again.

One stack serves every test (`serving_stack`: baseline serves between them): a hanging
variant (`mtp-hang`, reachable by the alias `hang`) keeps a switch mid-work for as long as
the test needs. The
undo's own time is measured from the command's lines (when it began to undo, when it said
it was done); the exit must follow within 5 s, and the signal must reach the undo within 5 s.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from tests.swap.conftest import Stack, running_containers

pytestmark = pytest.mark.docker

PROMPT_S = 5.0  # the signal reaches the undo, and the undo's end the exit, within this
UNDO_S = 30.0  # a rollback's known work: remove the hanging variant, start baseline, gate it


class Lines:
    """A command in the background, every line of its stdout and stderr stamped on arrival."""

    def __init__(self, stack: Stack, *args: str) -> None:
        self.began = time.monotonic()
        self.process = stack.popen(*args)
        self.lines: list[tuple[float, str]] = []
        self.readers = [
            threading.Thread(target=self._read, args=(stream,), daemon=True)
            for stream in (self.process.stdout, self.process.stderr)
        ]
        for reader in self.readers:
            reader.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def text(self) -> str:
        return "\n".join(f"{t - self.began:6.2f} {line}" for t, line in self.lines)

    def when(self, found: Callable[[str], bool], timeout: float = 90) -> float:
        """The arrival time of the first line that `found` accepts (waiting for it)."""
        deadline = time.monotonic() + timeout
        while True:
            hit = next((t for t, line in list(self.lines) if found(line)), None)
            if hit is not None:
                return hit
            assert self.process.poll() is None or any(r.is_alive() for r in self.readers), self.text()
            assert time.monotonic() < deadline, self.text()
            time.sleep(0.05)

    def terminate(self) -> float:
        sent = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        self.lines.append((sent, "(test) SIGTERM sent"))
        return sent

    def exit(self, timeout: float = 120) -> tuple[int, float]:
        """The exit code and the time of the exit (polled every 20 ms)."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            if time.monotonic() > deadline:
                self.process.kill()
                pytest.fail(f"no exit within {timeout}s of SIGTERM:\n{self.text()}")
            time.sleep(0.02)
        ended = time.monotonic()
        for reader in self.readers:
            reader.join(10)
        return self.process.returncode, ended


def wait_running(docker_client, stack: Stack, variant: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = running_containers(docker_client, stack.project)
        if variant in [c.labels["vllm-composer.variant"] for c in running]:
            return
        time.sleep(0.1)
    pytest.fail(f"{variant} never started")


def assert_baseline_serves(stack: Stack, docker_client) -> None:
    """Only baseline runs, `status` says it is ready, and the port answers a keyed client."""
    running = running_containers(docker_client, stack.project)
    assert [c.labels["vllm-composer.variant"] for c in running] == ["baseline"]
    status = stack.status()
    assert (status["variant"], status["health"]) == ("baseline", "ready"), status
    reply = httpx.get(
        f"http://127.0.0.1:{stack.port}/v1/models",
        headers={"Authorization": f"Bearer {stack.api_key}"},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text


def assert_prompt(sent: float, undo_began: float, undo_done: float, ended: float, output: str) -> None:
    """The undo began within 5 s of the signal, and the exit came within 5 s of its end."""
    assert undo_began - sent < PROMPT_S, f"undo began {undo_began - sent:.1f}s after SIGTERM\n{output}"
    assert ended - undo_done < PROMPT_S, f"exit {ended - undo_done:.1f}s after the undo\n{output}"
    assert "Traceback" not in output and "Aborted!" not in output


def test_up_mid_swap(serving_stack, docker_client) -> None:
    command = Lines(serving_stack, "up", "mtp-hang", "--timeout", "90")
    wait_running(docker_client, serving_stack, "mtp-hang")
    sent = command.terminate()
    code, ended = command.exit()
    output = command.text()
    assert code == 130, output
    undo_began = command.when(lambda line: "rolling back" in line or "rolled back" in line)
    undo_done = command.when(lambda line: "rolled back to baseline" in line)
    assert_prompt(sent, undo_began, undo_done, ended, output)
    assert_baseline_serves(serving_stack, docker_client)


def test_bench_mid_sweep(serving_stack, docker_client, tmp_path) -> None:
    args = ("bench", "--variants", "mtp", "--k", "3", "--max-tokens", "2000", "--warmup", "0")
    command = Lines(serving_stack, *args, "--out", str(tmp_path))
    command.when(lambda line: "mtp K=3: run 1/5" in line)
    sent = command.terminate()
    code, ended = command.exit()
    output = command.text()
    assert code == 130, output
    undo_began = command.when(lambda line: "restoring baseline" in line or "baseline serves again" in line)
    undo_done = command.when(lambda line: "baseline serves again" in line)
    assert_prompt(sent, undo_began, undo_done, ended, output)
    assert json.loads((tmp_path / "bench.json").read_text())["interrupted"]
    assert_baseline_serves(serving_stack, docker_client)


DECIDE_STACK = """
[stack.env]
SIM_HYBRID_MODEL = "1"
[variants.baseline]
env = { SIM_LOAD_SECONDS = "4" }
"""


def test_bench_decide_mid_switch(serving_stack, docker_client, tmp_path) -> None:
    """Interrupted while its follower thread switches to baseline (slow to load here): the
    follower rolls back, the sweep restores baseline once, the command exits."""
    extra = tmp_path / "decide.toml"
    extra.write_text(DECIDE_STACK, encoding="utf-8")
    args = ("--stack", str(extra), "bench", "--decide", "--variants", "baseline,mtp", "--k", "7")
    args += ("--concurrency", "1,16", "--prompt-tokens", "128", "--runs", "1", "--warmup", "0")
    command = Lines(serving_stack, *args, "--max-tokens", "300", "--out", str(tmp_path / "out"))
    command.when(lambda line: "switching: switch baseline" in line, timeout=150)
    sent = command.terminate()
    code, ended = command.exit()
    output = command.text()
    assert code == 130, output
    rolled = command.when(lambda line: "switching: failed baseline" in line)
    assert "interrupted; rolled back to mtp" in output
    undo_done = command.when(lambda line: "baseline serves again" in line)
    assert rolled < undo_done  # the follower's rollback, then the sweep's restore
    assert undo_done - sent < UNDO_S, f"restored {undo_done - sent:.1f}s after SIGTERM\n{output}"
    assert ended - undo_done < PROMPT_S, f"exit {ended - undo_done:.1f}s after the undo\n{output}"
    assert output.count("baseline serves again") == 1 and "Traceback" not in output
    assert_baseline_serves(serving_stack, docker_client)


def ask_for(stack: Stack, model: str, until: threading.Event) -> threading.Thread:
    """Keyed requests for `model` in the background until `until` is set (a request waits on
    the switch it asks for; one sent before the follower's first long poll is refused)."""

    def send() -> None:
        while not until.is_set():
            with contextlib.suppress(httpx.HTTPError):  # what it gets is not asserted here
                httpx.post(
                    f"http://127.0.0.1:{stack.port}/v1/completions",
                    json={"model": model, "prompt": "hi", "max_tokens": 4},
                    headers={"Authorization": f"Bearer {stack.api_key}"},
                    timeout=150,
                )
            until.wait(0.2)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    return sender


def follow_event(kind: str, text: str = "") -> Callable[[str], bool]:
    def found(line: str) -> bool:
        if not line.startswith("{"):
            return False
        event = json.loads(line)
        return event["event"] == kind and text in event["reason"]

    return found


def test_follow_mid_switch(serving_stack, docker_client) -> None:
    command = Lines(serving_stack, "follow", "--json", "--timeout", "90")
    command.when(follow_event("start"))
    asked = threading.Event()
    sender = ask_for(serving_stack, "hang", asked)
    command.when(follow_event("switch"))
    asked.set()
    wait_running(docker_client, serving_stack, "mtp-hang")
    sent = command.terminate()
    code, ended = command.exit()
    output = command.text()
    assert code == 130, output
    undo_done = command.when(follow_event("failed", "rolled back to baseline"))
    assert undo_done - sent < UNDO_S, f"rolled back {undo_done - sent:.1f}s after SIGTERM\n{output}"
    assert ended - undo_done < PROMPT_S, f"exit {ended - undo_done:.1f}s after the undo\n{output}"
    assert command.when(follow_event("stop")) >= undo_done
    sender.join(30)
    assert_baseline_serves(serving_stack, docker_client)


def test_follow_idle(serving_stack, docker_client) -> None:
    command = Lines(serving_stack, "follow", "--json")
    command.when(follow_event("serving"))
    time.sleep(1)  # inside the long poll for the next demand
    sent = command.terminate()
    code, ended = command.exit()
    output = command.text()
    assert code == 130, output
    assert ended - sent < PROMPT_S, f"exit {ended - sent:.1f}s after SIGTERM\n{output}"
    assert command.when(follow_event("stop", "stopped by a signal"))
    assert_baseline_serves(serving_stack, docker_client)
