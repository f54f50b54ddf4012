"""The gateway under load on the real daemon with the simulator: a switch costs clients
nothing (no refused request, no 5xx, no cut stream), by-hand compose runs are held too,
and a variant that never becomes ready ends in 503/429 with Retry-After, not a hang."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.docker

CHAT = "/v1/chat/completions"


@dataclass
class Outcome:
    """One client request as the client saw it."""

    started: float
    status: int = 0
    error: str = ""
    ttfb: float | None = None
    done: bool = False


@dataclass
class Load:
    """Streaming clients that keep sending requests until stopped."""

    url: str
    key: str
    clients: int
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def _client(self) -> None:
        body = {
            "model": "claude-opus-5",
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 24,
            "stream": True,
        }
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(timeout=httpx.Timeout(120.0, connect=5.0), trust_env=False) as http:
            while not self._stop.is_set():
                outcome = Outcome(time.monotonic())
                self.outcomes.append(outcome)
                try:
                    with http.stream("POST", self.url + CHAT, json=body, headers=headers) as response:
                        outcome.status = response.status_code
                        for line in response.iter_lines():
                            if outcome.ttfb is None:
                                outcome.ttfb = time.monotonic() - outcome.started
                            if line == "data: [DONE]":
                                outcome.done = True
                except httpx.HTTPError as err:
                    outcome.error = type(err).__name__

    def __enter__(self) -> Load:
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(self.clients)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=150)

    def refused(self) -> list[Outcome]:
        """Requests that got no 200 (connection refused or reset, 4xx, 5xx)."""
        return [o for o in self.outcomes if (o.status or o.error) and o.status != 200]

    def cut(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == 200 and not o.done]


def _up(sim_stack, variant: str) -> tuple[dict, float]:
    began = time.monotonic()
    done = sim_stack.run("up", variant, "--json", timeout=300)
    took = time.monotonic() - began
    result = json.loads(done.stdout.splitlines()[-1])
    return result, took


def test_swaps_and_a_rollback_under_16_streams_cost_clients_nothing(sim_stack, docker_client) -> None:
    first, _ = _up(sim_stack, "baseline")
    assert first["outcome"] == "started", first
    gateway = docker_client.containers.get(f"{sim_stack.project}-gateway-1")
    swaps: list[tuple[str, dict, float]] = []
    with Load(f"http://127.0.0.1:{sim_stack.port}", sim_stack.api_key, clients=16) as load:
        time.sleep(2)
        for variant in ("mtp", "dflash2", "mtp-crash", "baseline"):
            result, took = _up(sim_stack, variant)
            swaps.append((variant, result, took))
            time.sleep(1.5)
    outcomes = {v: r.get("outcome") for v, r, _ in swaps}
    assert outcomes == {
        "mtp": "swapped",
        "dflash2": "swapped",
        "mtp-crash": "rolled-back",
        "baseline": "swapped",
    }
    finished = [o for o in load.outcomes if o.status or o.error]
    assert len(finished) > 100, f"the load made only {len(finished)} requests"
    assert load.refused() == [], load.refused()[:5]
    assert load.cut() == [], load.cut()[:5]
    longest_swap = max(took for _, _, took in swaps)
    slowest = max(o.ttfb for o in finished if o.ttfb is not None)
    assert slowest <= longest_swap + 1.0, (slowest, longest_swap)
    swapped = [r for _, r, _ in swaps if r.get("outcome") == "swapped"]
    # the streams in flight at a switch go on on the new variant (none waited for, none cut)
    in_flight = sum(r["drained"]["finished"] + r["drained"]["continued"] for r in swapped)
    assert in_flight > 0, "no swap found a request in flight"
    assert all(r["drained"]["cut"] == 0 for r in swapped)
    # the gateway itself was never restarted by any swap
    assert docker_client.containers.get(f"{sim_stack.project}-gateway-1").id == gateway.id
    # its status saw every swap: target, outcome and stages, newest first; no key in it
    url = f"http://127.0.0.1:{sim_stack.port}/gateway/status"
    assert httpx.get(url, timeout=10).status_code == 401
    reply = httpx.get(url, headers={"Authorization": f"Bearer {sim_stack.api_key}"}, timeout=10)
    status = reply.json()
    assert sim_stack.api_key not in reply.text
    assert status["serving"] == ["baseline"] and status["switch"] is None
    seen = [(s["from"], s["to"], s["outcome"]) for s in status["switches"]][:4]
    assert seen == [
        ("dflash2", "baseline", "ok"),
        ("dflash2", "mtp-crash", "failed"),
        ("mtp", "dflash2", "ok"),
        ("baseline", "mtp", "ok"),
    ], seen
    assert all({"drain", "gate"} <= {st["stage"] for st in s["stages"]} for s in status["switches"][:4:2])


def _render_by_hand(sim_stack, variant: str, out: Path) -> Path:
    done = sim_stack.run("render", variant, "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out / f"{variant}.yml"


def _compose_up_by_hand(sim_stack, compose_file: Path) -> None:
    done = subprocess.run(
        ["docker", "compose", "--project-name", sim_stack.project, "-f", str(compose_file), "up", "-d"],
        env=sim_stack.env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_a_by_hand_compose_up_of_another_variant_refuses_nothing(sim_stack, docker_client, tmp_path) -> None:
    first, _ = _up(sim_stack, "baseline")
    assert first["outcome"] == "started", first
    gateway_id = docker_client.containers.get(f"{sim_stack.project}-gateway-1").id
    compose_file = _render_by_hand(sim_stack, "mtp", tmp_path / "rendered")
    with Load(f"http://127.0.0.1:{sim_stack.port}", sim_stack.api_key, clients=8) as load:
        time.sleep(2)
        _compose_up_by_hand(sim_stack, compose_file)
        deadline = time.monotonic() + 60
        while sim_stack.status().get("variant") != "mtp" or sim_stack.status()["health"] != "ready":
            assert time.monotonic() < deadline, "mtp did not come up"
            time.sleep(0.5)
        time.sleep(2)
    assert load.refused() == [], load.refused()[:5]  # streams in flight at the stop may be cut
    served_after = [o for o in load.outcomes if o.done]
    assert len(served_after) > 20
    assert docker_client.containers.get(f"{sim_stack.project}-gateway-1").id == gateway_id


def test_a_variant_that_hangs_gets_503_then_429_and_a_wrong_key_401(
    sim_stack, docker_client, tmp_path
) -> None:
    with sim_stack.stack_file.open("a", encoding="utf-8") as handle:
        handle.write("\n[gateway]\nhold_timeout = 3\nmax_held = 3\n")
    first, _ = _up(sim_stack, "baseline")
    assert first["outcome"] == "started", first
    _compose_up_by_hand(sim_stack, _render_by_hand(sim_stack, "mtp-hang", tmp_path / "rendered"))
    url = f"http://127.0.0.1:{sim_stack.port}"
    headers = {"Authorization": f"Bearer {sim_stack.api_key}"}
    began = time.monotonic()
    wrong = httpx.get(url + "/v1/models", headers={"Authorization": "Bearer wrong"}, timeout=10)
    assert wrong.status_code == 401 and time.monotonic() - began < 1.0  # never held
    held: dict[int, httpx.Response] = {}

    def wait(index: int) -> None:
        held[index] = httpx.get(url + "/v1/models", headers=headers, timeout=30)

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    full = httpx.get(url + "/v1/models", headers=headers, timeout=10)
    assert full.status_code == 429 and int(full.headers["retry-after"]) >= 1
    for thread in threads:
        thread.join(15)
    waited = time.monotonic() - began
    assert [held[i].status_code for i in range(3)] == [503, 503, 503]
    assert all(int(held[i].headers["retry-after"]) >= 1 for i in range(3))
    assert 3.0 <= waited < 12.0
    metrics = httpx.get(url + "/gateway/metrics", timeout=10).text
    for reason in ("hold_timeout", "queue_full", "unauthorized"):
        assert f'gateway_refused_requests_total{{reason="{reason}"}}' in metrics
