"""`up` killed with SIGKILL while nothing serves (the old variant stopped, the new one never
ready): the gateway answers held and new requests 503 at once, naming the repair, instead of
holding them for hold_timeout; `status` names the same repair, and it works (real daemon,
simulator)."""

from __future__ import annotations

import os
import signal
import threading

import httpx
import pytest

from composer.engine import retry
from composer.engine.retry import Pending

from .conftest import running_containers
from .test_hold_tether_docker import IMAGE, _gateway

pytestmark = pytest.mark.docker


def _ask(url: str, key: str) -> httpx.Response:
    body = {"model": "claude-opus-5", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    with httpx.Client(timeout=httpx.Timeout(120.0, connect=5.0), trust_env=False) as http:
        return http.post(url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})


def test_a_killed_up_with_nothing_serving_refuses_clients_at_once_naming_up(sim_stack, docker_client) -> None:
    done = sim_stack.run(*IMAGE, "up", "baseline", timeout=180)
    assert done.returncode == 0, done.stderr
    url = f"http://127.0.0.1:{sim_stack.port}"
    control = _gateway(docker_client, sim_stack.project)
    swap = sim_stack.popen(*IMAGE, "up", "mtp-hang")  # stops baseline, then waits for a hang
    try:

        def baseline_gone_and_held() -> None:
            running = [
                c.labels.get("vllm-composer.variant")
                for c in running_containers(docker_client, sim_stack.project)
            ]
            if running != ["mtp-hang"]:
                raise Pending(f"baseline still runs or mtp-hang not started: {running}")
            if not [h for h in control.state().holds if h.owner.startswith("compose-spec up")]:
                raise Pending("up holds nothing")

        retry.within(120.0, 0.2)(baseline_gone_and_held)
        held: list[httpx.Response] = []
        client = threading.Thread(target=lambda: held.append(_ask(url, sim_stack.api_key)), daemon=True)
        client.start()

        def waiting() -> None:
            if control.state().held < 1:
                raise Pending("the client is not held yet")

        retry.within(20.0, 0.1)(waiting)
        os.kill(swap.pid, signal.SIGKILL)
        swap.wait(timeout=10)
    finally:
        if swap.poll() is None:
            swap.kill()
            swap.wait(timeout=10)
    client.join(timeout=60)  # hold_timeout is minutes: an answer within this is the new one
    assert not client.is_alive(), "the held client is still held"
    (answer,) = held
    new = _ask(url, sim_stack.api_key)
    for reply in (answer, new):
        assert reply.status_code == 503 and "`compose-spec up`" in reply.text, reply.text
    status = sim_stack.status(exits=(0, 1))
    assert any(w.endswith("`compose-spec up mtp-hang` repairs it") for w in status["warnings"]), status
    repaired = sim_stack.run(*IMAGE, "up", "baseline", timeout=180)
    assert repaired.returncode == 0, repaired.stderr
    assert _ask(url, sim_stack.api_key).status_code == 200
