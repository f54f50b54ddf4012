"""A changed `[gateway]` setting on the real daemon with the simulator: applied in place by `up`
while a client sends a request every 50 ms (none fails, the container stays the same), shown
in `/gateway/status`, not seen as a difference by the next `up`, and kept across a restart
of the container."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

pytestmark = pytest.mark.docker

CHANGE = ("--set", "gateway.max_held=250", "--set", "gateway.hold_timeout=77")


def _client(stack, stop: threading.Event, seen: list) -> None:
    """A request every 50 ms through the stack's port; each outcome recorded."""
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    body = {"model": "claude-opus-5", "prompt": "hi", "max_tokens": 2}
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            try:
                seen.append(
                    client.post(
                        f"http://127.0.0.1:{stack.port}/v1/completions", headers=headers, json=body
                    ).status_code
                )
            except httpx.TransportError as err:
                seen.append(type(err).__name__)
            stop.wait(0.05)


def _settings(stack) -> dict:
    reply = httpx.get(
        f"http://127.0.0.1:{stack.port}/gateway/status", headers={"Authorization": f"Bearer {stack.api_key}"}
    )
    return reply.json()["settings"]


def test_a_changed_gateway_setting_is_applied_in_place_under_traffic(sim_stack, docker_client) -> None:
    assert sim_stack.run("up", "baseline").returncode == 0
    gateway = docker_client.containers.get(f"{sim_stack.project}-gateway-1")
    planned = sim_stack.run(*CHANGE, "up", "baseline", "--dry-run")
    assert "apply the gateway's changed settings in place (hold_timeout, max_held)" in planned.stdout, planned

    stop, seen = threading.Event(), []
    client = threading.Thread(target=_client, args=(sim_stack, stop, seen))
    client.start()
    while len(seen) < 5:  # traffic flows before the change
        time.sleep(0.05)
    done = sim_stack.run(*CHANGE, "up", "baseline", "--json")
    count = len(seen)
    while len(seen) < count + 5:  # and after it
        time.sleep(0.05)
    stop.set()
    client.join(timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["outcome"] == "gateway updated", result
    assert result["plan"]["gateway_in_place"] == ["GATEWAY_HOLD_TIMEOUT", "GATEWAY_MAX_HELD"], result
    assert [s for s in seen if s != 200] == [], seen
    assert docker_client.containers.get(gateway.id).id == gateway.id  # the same container serves
    assert gateway.id == docker_client.containers.get(f"{sim_stack.project}-gateway-1").id
    settings = _settings(sim_stack)
    assert (settings["GATEWAY_MAX_HELD"], settings["GATEWAY_HOLD_TIMEOUT"]) == (250, 77.0), settings

    # the next `up` sees no difference: nothing to change, and `docker compose` recreates nothing
    again = sim_stack.run(*CHANGE, "up", "baseline", "--dry-run")
    assert "nothing to change" in again.stdout, again.stdout
    # a restart of the same container keeps the settings it was given in place
    gateway.restart(timeout=10)
    end = time.monotonic() + 30
    while True:
        try:
            settings = _settings(sim_stack)
            break
        except (httpx.TransportError, ValueError, KeyError):
            assert time.monotonic() < end, "the restarted gateway did not answer"
            time.sleep(0.2)
    assert settings["GATEWAY_MAX_HELD"] == 250, settings
    assert "nothing to change" in sim_stack.run(*CHANGE, "up", "baseline", "--dry-run").stdout
