"""A swap's hold ends with its owner: `kill -9` of `up` during the drain releases the
clients it held at once, not after the 60 s lease; the drain shows its progress only when
something runs; the gateway's probes leave no line in the variant's access log (real
daemon, simulator; TEST_SIM_IMAGE names another simulator image to run)."""

from __future__ import annotations

import os
import signal
import threading

import httpx
import pytest

from composer import labels
from composer.engine import retry
from composer.engine.retry import Pending
from composer.gateway.host.client import GatewayControl

pytestmark = pytest.mark.docker

CHAT = "/v1/chat/completions"
IMAGE = ("--set", f"images.vllm={os.environ.get('TEST_SIM_IMAGE') or 'vllm-sim:latest'}")


def _gateway(client, project: str) -> GatewayControl:
    found = client.containers.list(
        filters={"label": [f"com.docker.compose.project={project}", f"{labels.ROLE}={labels.ROLE_GATEWAY}"]}
    )
    assert found, "no gateway container"
    return GatewayControl(found[0])


def _chat(url: str, key: str, max_tokens: int, stop: threading.Event | None = None) -> dict:
    """One chat request: plain, or (with `stop`) a stream read until `stop` is set."""
    body = {
        "model": "claude-opus-5",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": max_tokens,
        "stream": stop is not None,
    }
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(timeout=httpx.Timeout(180.0, connect=5.0), trust_env=False) as http:
        if stop is None:
            return {"status": http.post(url + CHAT, json=body, headers=headers).status_code}
        with http.stream("POST", url + CHAT, json=body, headers=headers) as response:
            lines = 0
            for _ in response.iter_lines():
                lines += 1
                if stop.is_set():
                    break
        return {"status": response.status_code, "lines": lines}


def test_kill_9_of_up_during_the_drain_releases_its_held_clients(sim_stack, docker_client) -> None:
    # the reference box's token rate: one stream keeps the drain busy until the test ends it
    sim_stack.stack_file.write_text(
        sim_stack.stack_file.read_text().replace('SIM_TIME_SCALE = "20"', 'SIM_TIME_SCALE = "1"')
    )
    done = sim_stack.run(*IMAGE, "up", "baseline", timeout=180)
    assert done.returncode == 0, done.stderr
    assert "drain" not in done.stderr.lower()  # an empty project has nothing to drain
    url = f"http://127.0.0.1:{sim_stack.port}"
    control = _gateway(docker_client, sim_stack.project)

    long_stream: dict = {}
    stop_stream = threading.Event()
    streaming = threading.Thread(
        target=lambda: long_stream.update(_chat(url, sim_stack.api_key, 8000, stop_stream)), daemon=True
    )
    streaming.start()

    def in_flight() -> None:
        if control.state().inflight < 1:
            raise Pending("the long stream has not reached the gateway yet")

    retry.within(20.0, 0.2)(in_flight)

    swap = sim_stack.popen(*IMAGE, "up", "mtp", "--drain")  # the drain waits for the stream
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(swap.stderr or ()), daemon=True)
    reader.start()
    try:

        def held_by_up() -> str:
            holds = [h for h in control.state().holds if h.owner.startswith("compose-spec up")]
            if not holds:
                raise Pending("up has not set its hold yet")
            return holds[0].owner

        owner = retry.within(60.0, 0.2)(held_by_up)
        held: dict = {}
        client = threading.Thread(target=lambda: held.update(_chat(url, sim_stack.api_key, 4)), daemon=True)
        client.start()

        def waiting() -> None:
            if control.state().held < 1:
                raise Pending("the client is not held yet")

        retry.within(20.0, 0.2)(waiting)

        def progress_shown() -> None:
            if not any(line.startswith("draining (1 in flight, ") for line in said):
                raise Pending(f"no drain progress line yet: {said}")

        retry.within(60.0, 0.2)(progress_shown)  # e.g. `draining (1 in flight, 2 s of 60 s)`
        assert streaming.is_alive()  # the drain still waits for the long stream
        os.kill(swap.pid, signal.SIGKILL)
        swap.wait(timeout=10)

        client.join(timeout=30)
        # answered by the old variant while the drained stream still runs: the hold ended with
        # its owner, not at the end of the drain plus the 60 s lease
        assert held == {"status": 200}
        assert streaming.is_alive()
        assert all(h.owner != owner for h in control.state().holds)
    finally:
        if swap.poll() is None:
            swap.kill()
            swap.wait(timeout=10)
    stop_stream.set()
    streaming.join(timeout=60)
    assert long_stream.get("status") == 200 and long_stream["lines"] > 1

    # the gateway probed the variant every few seconds all along: none of it is in its log
    (variant,) = docker_client.containers.list(
        filters={"label": [f"com.docker.compose.project={sim_stack.project}", f"{labels.VARIANT}=baseline"]}
    )
    log = variant.logs().decode(errors="replace")
    assert '"POST /v1/chat/completions HTTP/1.1" 200' in log  # the access log is on
    assert "GET /health" not in log and "GET /metrics" not in log
