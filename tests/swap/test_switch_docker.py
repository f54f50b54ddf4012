"""Request-driven switching on the real daemon with the simulator: the gateway raises the
demands, `compose-spec follow` runs them through the gated `up` with sleep standby."""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, isolated_env, remove_project
from tests.swap.conftest import Stack

pytestmark = pytest.mark.docker

MIN_RESIDENCY = 12
SWITCHING = """
[gateway]
switch_on_model = true
min_residency = {residency}
residency_wait = {wait}
hold_timeout = 120
{extra}
[variants.mtp]
aliases = ["fast"]
[variants.baseline]
aliases = ["plain"]
"""


def switch_stack_at(
    tmp_path: Path, residency: int, wait: int, scale: str, extra: str = "", tail: str = ""
) -> Stack:
    """A simulator stack with sleep standby, aliases and the given residency."""
    project = f"vctsw{uuid.uuid4().hex[:10]}"
    port = free_port()
    stack_file = tmp_path / "switch-stack.toml"
    stack_file.write_text(
        f'[stack]\nproject = "{project}"\nport = {port}\nstandby = "sleep"\nprobation = "0s"\n'
        f'[stack.env]\nSIM_LOAD_SECONDS = "0.3"\nSIM_TIME_SCALE = "{scale}"\n'
        + SWITCHING.format(residency=residency, wait=wait, extra=extra)
        + tail,
        encoding="utf-8",
    )
    env = isolated_env(tmp_path)
    return Stack(project, port, env["VLLM_API_KEY"], env, stack_file)


class Follow:
    """`compose-spec follow --json` in the background, its events stamped as they arrive."""

    def __init__(self, stack: Stack) -> None:
        self.process = stack.popen("follow", "--json")
        self.events: list[tuple[float, dict]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self.events.append((time.monotonic(), json.loads(line)))

    def wait_for(self, kind: str, count: int = 1, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while sum(e["event"] == kind for _, e in self.events) < count:
            assert self.process.poll() is None, self.process.stderr.read() if self.process.stderr else ""
            assert time.monotonic() < deadline, self.events
            time.sleep(0.1)

    def of(self, kind: str) -> list[tuple[float, dict]]:
        return [(t, e) for t, e in self.events if e["event"] == kind]

    def stop(self) -> str:
        self.process.terminate()
        try:
            _, err = self.process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        self.reader.join(5)
        return err


@pytest.fixture
def switch_stack(tmp_path, docker_client, sim_images) -> Iterator[Stack]:
    stack = switch_stack_at(tmp_path, MIN_RESIDENCY, 2 * MIN_RESIDENCY, "20")
    yield stack
    remove_project(docker_client, stack.project)


def completion(stack: Stack, model: str) -> tuple[int, float]:
    began = time.monotonic()
    reply = httpx.post(
        f"http://127.0.0.1:{stack.port}/v1/completions",
        json={"model": model, "prompt": "Say hello", "max_tokens": 8, "temperature": 0},
        headers={"Authorization": f"Bearer {stack.api_key}"},
        timeout=180,
    )
    return reply.status_code, time.monotonic() - began


def gateway_metrics(stack: Stack) -> str:
    return httpx.get(f"http://127.0.0.1:{stack.port}/gateway/metrics", timeout=10).text


def test_alternating_aliases_inside_one_residency_switch_once_and_fail_nothing(switch_stack) -> None:
    done = switch_stack.run("up", "baseline", timeout=180)
    assert done.returncode == 0, done.stderr
    follow = Follow(switch_stack)
    try:
        follow.wait_for("serving")
        results: list[tuple[str, int, float, float]] = []
        began = time.monotonic()
        send_for = MIN_RESIDENCY - 4  # every request is sent inside one residency

        def client(model: str, offset: float) -> None:
            time.sleep(offset)
            while time.monotonic() - began < send_for:
                sent = time.monotonic()
                code, took = completion(switch_stack, model)
                results.append((model, code, sent - began, took))
                time.sleep(0.2)

        threads = [threading.Thread(target=client, args=a) for a in (("fast", 0.0), ("plain", 0.5))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(200)
        follow.wait_for("switched", 1)
        time.sleep(1)
    finally:
        err = follow.stop()
    switches = follow.of("switch")
    print("requests:", [(m, c, round(s, 1), round(t, 1)) for m, c, s, t in results])
    print("follow:", [(round(t - began, 1), e["event"], e["variant"], e["reason"]) for t, e in follow.events])
    assert results and all(code == 200 for _, code, _, _ in results), results  # zero failed requests
    assert {m for m, _, _, _ in results} == {"fast", "plain"}
    first = switches[0][0]
    inside = [e for t, e in switches if t - first < MIN_RESIDENCY]
    assert len(inside) == 1 and inside[0]["variant"] == "mtp", follow.events  # at most one switch
    # a second switch (the waiting "plain" requests) only once the residency is over
    for (a, _), (b, _) in itertools.pairwise(switches):
        assert b - a >= MIN_RESIDENCY, follow.events
    assert all(e["event"] != "failed" for _, e in follow.events), follow.events
    metrics = gateway_metrics(switch_stack)
    assert 'gateway_refused_requests_total{reason="residency"} 0.0' in metrics
    assert f'gateway_switches_total{{outcome="ok",reason="alias"}} {len(switches)}.0' in metrics
    assert "follow" not in err or "Traceback" not in err


AUTO_RESIDENCY = 6
WORKLOADS = '[workloads]\nchat-1 = "mtp"\nchat-16 = "baseline"\nlong-16 = "baseline"\n'


@pytest.fixture
def auto_stack(tmp_path, docker_client, sim_images) -> Iterator[Stack]:
    extra = 'policy = "auto"\npolicy_window = 3'
    stack = switch_stack_at(tmp_path, AUTO_RESIDENCY, 0, "20", extra, WORKLOADS)
    yield stack
    remove_project(docker_client, stack.project)


def _phase(stack: Stack, streams: int, prompt: int, max_tokens: int, until) -> list[int]:
    """Closed-loop streams of one request shape until `until()`; the status codes."""
    codes: list[int] = []
    body = {"model": "claude-opus-5", "prompt": [11] * prompt, "max_tokens": max_tokens, "ignore_eos": True}
    headers = {"Authorization": f"Bearer {stack.api_key}"}

    def loop() -> None:
        with httpx.Client(timeout=180, headers=headers) as client:
            while not until():
                codes.append(
                    client.post(f"http://127.0.0.1:{stack.port}/v1/completions", json=body).status_code
                )

    threads = [threading.Thread(target=loop) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    return codes


def test_auto_policy_follows_a_three_phase_trace_with_one_switch_per_phase(auto_stack) -> None:
    for variant in ("baseline", "mtp"):  # baseline asleep, mtp serves
        done = auto_stack.run("up", variant, timeout=180)
        assert done.returncode == 0, done.stderr
    follow = Follow(auto_stack)
    try:
        follow.wait_for("serving")
        phases = {}
        for name, streams, prompt, tokens, wanted in (
            ("chat", 1, 60, 100, None),
            ("long", 16, 4500, 200, "baseline"),
            ("chat again", 1, 60, 100, "mtp"),
        ):
            began = time.monotonic()
            seen = len(follow.of("switched"))

            def until(began=began, seen=seen, wanted=wanted) -> bool:
                """A phase lasts 6 s, or until its switch is done and a residency has passed."""
                took = time.monotonic() - began
                if wanted is None:
                    return took > 6
                return took > 60 or (len(follow.of("switched")) > seen and took > AUTO_RESIDENCY + 2)

            codes = _phase(auto_stack, streams, prompt, tokens, until)
            phases[name] = (began, time.monotonic(), codes)
    finally:
        follow.stop()
    print("follow:", [(e["event"], e["variant"], e["reason"]) for _, e in follow.events])
    for name, (began, ended, codes) in phases.items():
        assert codes and set(codes) == {200}, (name, codes)  # zero failed requests
        started = [e["variant"] for t, e in follow.of("switch") if began <= t < ended]
        assert len(started) <= 1, (name, started)  # at most one switch per phase
        phases[name] = started
    assert phases == {"chat": [], "long": ["baseline"], "chat again": ["mtp"]}, follow.events
    reasons = [e["reason"] for _, e in follow.of("switch")]
    # the first switch is to the 16-stream class: when concurrency first reaches it, the 3 s
    # window may still hold the chat phase's short prompts (chat-16 and long-16 both map to baseline)
    assert "-> long-16 = baseline" in reasons[0] or "-> chat-16 = baseline" in reasons[0], reasons
    assert "-> chat-1 = mtp" in reasons[1], reasons
    metrics = gateway_metrics(auto_stack)
    assert 'gateway_switches_total{outcome="ok",reason="auto"} 2.0' in metrics
