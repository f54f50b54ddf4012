"""The gateway's container replaced under traffic (real daemon, simulator): `up --recreate-gateway`
and a swap whose gateway needs a new container (another image tag) start the new gateway beside
the old one in the port holder's network, so a client sending a request every 50 ms sees no
failure, and `up`'s own count of failed probes of the published port, which it prints, is the
same: 0. `--dry-run` says that, and why, the gateway is replaced, and replaces nothing. No
wall-clock speed is asserted."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import httpx
import pytest

pytestmark = pytest.mark.docker

CLIENT_EVERY_S = 0.05


class Client:
    """A keyed `GET /v1/models` every CLIENT_EVERY_S in a thread; what failed (a 5xx, or no answer)."""

    def __init__(self, port: int, key: str) -> None:
        self.url, self.key = f"http://127.0.0.1:{port}/v1/models", key
        self.sent = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        while not self._stop.is_set():
            self.sent += 1
            try:
                with httpx.Client(timeout=httpx.Timeout(10.0, connect=2.0), trust_env=False) as client:
                    status = client.get(self.url, headers=headers).status_code
                if status >= 500:
                    self.failures.append(str(status))
            except httpx.HTTPError as err:
                self.failures.append(type(err).__name__)
            self._stop.wait(CLIENT_EVERY_S)

    def during(self, action: Callable[[], object]) -> object:
        self._thread.start()
        time.sleep(0.5)
        try:
            return action()
        finally:
            time.sleep(0.5)
            self._stop.set()
            self._thread.join()


def _nothing_failed(gap: dict, client: Client) -> None:
    """What `up` counted equals what the client saw: nothing refused, reset or answered 5xx."""
    assert gap["probes"] > 0
    assert (gap["failed"], client.failures) == (0, []), (gap, client.failures)
    assert client.sent >= 10


def test_recreate_gateway_reports_the_port_gap_the_client_saw(sim_stack, docker_client) -> None:
    up = sim_stack.run("up", "baseline", timeout=180)
    assert up.returncode == 0, up.stderr
    old = docker_client.containers.get(f"{sim_stack.project}-gateway-1").id

    planned = sim_stack.run("up", "--recreate-gateway", "--dry-run", "--json")
    assert planned.returncode == 0, planned.stderr
    result = json.loads(planned.stdout)
    plan = result["plan"]  # `up`'s result, with the one plan shape
    assert result["outcome"] == "planned" and plan["gateway_update"] is True and plan["keep"] == ["baseline"]
    assert plan["gateway_recreate_because"] == "--recreate-gateway" and plan["serving"] == "baseline"
    assert docker_client.containers.get(f"{sim_stack.project}-gateway-1").id == old  # nothing replaced

    client = Client(sim_stack.port, sim_stack.api_key)
    done = client.during(lambda: sim_stack.run("up", "--recreate-gateway", "--json", timeout=180))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (
        result["outcome"] == "gateway-recreated" and "baseline serves through it again" in result["notes"][0]
    )
    assert docker_client.containers.get(f"{sim_stack.project}-gateway-1").id != old
    gap = result["port_gap"]
    print(f"recreate-gateway: port_gap {gap}; client sent {client.sent}, failed {client.failures}")
    _nothing_failed(gap, client)

    line = sim_stack.run("up", "--recreate-gateway", timeout=180)  # the human line says the same
    assert line.returncode == 0, line.stderr
    said = line.stdout.strip().splitlines()[-1]
    assert "baseline serves through it again" in said
    assert "the port answered all" in said
    print(f"recreate-gateway line: {said}")


def test_a_swap_whose_gateway_needs_a_new_image_reports_the_port_gap(sim_stack, docker_client) -> None:
    up = sim_stack.run("up", "baseline", timeout=180)
    assert up.returncode == 0, up.stderr
    gateway = docker_client.containers.get(f"{sim_stack.project}-gateway-1")
    image = gateway.attrs["Config"]["Image"]
    tag = f"{sim_stack.project}-gateway:retagged"  # the same image under another name: a new container
    docker_client.images.get(image).tag(tag)
    try:
        change = ("--set", f"gateway.image={tag}")
        planned = sim_stack.run(*change, "up", "baseline", "--dry-run")
        assert planned.returncode == 0, planned.stderr
        assert "the gateway is replaced by a new container" in planned.stdout
        assert f"image {image} -> {tag}" in planned.stdout
        assert docker_client.containers.get(gateway.name).id == gateway.id

        client = Client(sim_stack.port, sim_stack.api_key)
        done = client.during(lambda: sim_stack.run(*change, "up", "baseline", "--json", timeout=180))
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["plan"]["gateway_update"] is True
        assert docker_client.containers.get(gateway.name).attrs["Config"]["Image"] == tag
        gap = result["port_gap"]
        print(
            f"swap with a new gateway image: port_gap {gap}; client sent {client.sent}, failed {client.failures}"
        )
        _nothing_failed(gap, client)
        note = next(n for n in result["notes"] if n.startswith("the gateway was replaced by a new container"))
        assert "started beside the old one" in note and "the port answered all" in note, note
    finally:
        sim_stack.run("down", timeout=120)
        docker_client.images.remove(tag, noprune=True)
