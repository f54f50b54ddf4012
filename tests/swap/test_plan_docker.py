"""The swap plan on the real daemon with the simulator: standby turned on and off, the
gateway's settings changed with a stream in flight, a gateway-only change, a killed
gateway, --dry-run, and status during a swap. One stack, one cold start per step."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.swap.conftest import running_containers

pytestmark = pytest.mark.docker


def _up(stack, *args: str, timeout: float = 240) -> tuple[int, dict, str]:
    done = stack.run(*args, "--json", timeout=timeout)
    lines = done.stdout.strip().splitlines()
    return done.returncode, json.loads(lines[-1]) if lines else {}, done.stderr


def _docker_state(client, project: str) -> list[tuple]:
    """Every container of the project (ID, status, start time, restart policy) and its networks."""
    found = []
    for c in client.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"}):
        c.reload()
        state = c.attrs["State"]
        policy = c.attrs["HostConfig"]["RestartPolicy"]["Name"]
        found.append((c.id, state["Status"], state["StartedAt"], policy))
    networks = sorted(
        n.id for n in client.networks.list(filters={"label": f"com.docker.compose.project={project}"})
    )
    return [*sorted(found), ("networks", *networks)]


def _gateway_state(client, project: str) -> dict:
    from composer.gateway.client import GatewayControl

    raw = GatewayControl(client.containers.get(f"{project}-gateway-1")).state().raw
    return {k: raw[k] for k in ("upstream", "held", "inflight", "holds", "routes_total")}


def _stream(stack, served: str, out: dict) -> None:
    """A streamed completion through the gateway; records whether it completed."""
    url = f"http://127.0.0.1:{stack.port}/v1/completions"
    body = {"model": served, "prompt": "count", "max_tokens": 60, "stream": True}
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    try:
        with httpx.stream("POST", url, json=body, headers=headers, timeout=120) as reply:
            out["status"] = reply.status_code
            out["chunks"] = sum(1 for line in reply.iter_lines() if line.startswith("data:"))
            out["done"] = True
    except httpx.HTTPError as err:
        out["error"] = f"{type(err).__name__}: {err}"


def test_standby_turned_on_then_off_settings_and_dry_runs(sim_stack, docker_client) -> None:
    stack = sim_stack
    code, result, err = _up(stack, "up", "mtp")
    assert code == 0, err
    served = stack.status()["served_model_name"]

    # --dry-run changes nothing: Docker's containers, networks and the gateway's state
    before, gateway_before = (
        _docker_state(docker_client, stack.project),
        _gateway_state(docker_client, stack.project),
    )
    for args in (("up", "baseline"), ("up", "mtp"), ("--set", "stack.standby=sleep", "up", "baseline")):
        done = stack.run(*args, "--dry-run", timeout=60)
        assert done.returncode == 0, done.stderr
        assert ("nothing to do" in done.stdout) == (args == ("up", "mtp")), done.stdout
    code, planned, err = _up(stack, "--set", "gateway.hold_timeout=77", "up", "mtp", "--dry-run")
    assert code == 0 and planned["outcome"] == "planned" and planned["plan"]["gateway_update"], planned
    assert _docker_state(docker_client, stack.project) == before
    assert _gateway_state(docker_client, stack.project) == gateway_before

    # the capacity figures `up` plans with are the ones doctor prints (one capacity model)
    code, planned, err = _up(stack, "up", "baseline", "--dry-run")
    assert code == 0 and planned["plan"]["capacity"]["target"] == "baseline", planned
    doctor = json.loads(stack.run("doctor", "baseline", "--json").stdout)
    figures = dict(doctor["capacity"]["per_gpu"]["baseline"])
    assert figures.pop("sleep_residue_bytes") == 0  # baseline does not sleep in this stack
    assert planned["plan"]["capacity"]["per_gpu"] == figures, (planned, doctor)
    assert (
        planned["plan"]["capacity"]["release_budget_bytes"]
        == doctor["capacity"]["release_budget_bytes"]["baseline"]
    )

    # a [gateway] setting changed while a stream is in flight: drained first, never cut
    out: dict = {}
    streaming = threading.Thread(target=_stream, args=(stack, served, out))
    streaming.start()
    time.sleep(0.5)
    code, result, err = _up(stack, "--set", "gateway.hold_timeout=77", "up", "mtp")
    streaming.join(timeout=120)
    assert code == 0, err
    assert result["outcome"] == "gateway updated", result
    assert out.get("done") and out.get("status") == 200 and out.get("chunks", 0) > 1, out
    assert result["drained"]["cut"] == 0, result
    env = docker_client.containers.get(f"{stack.project}-gateway-1").attrs["Config"]["Env"]
    assert "GATEWAY_HOLD_TIMEOUT=77" in env  # the new setting is applied, the variant unchanged
    assert stack.status()["variant"] == "mtp"

    # standby turned on while mtp serves in stop mode: a cold stop with a note, something serves
    sleepy = ("--set", "stack.standby=sleep", "--set", "gateway.hold_timeout=77")
    code, result, err = _up(stack, *sleepy, "up", "baseline")
    assert code == 0, err
    assert any("started without sleep mode" in n for n in result["notes"]), result
    assert stack.run(*sleepy, "status", "--json").returncode == 0
    status = json.loads(stack.run(*sleepy, "status", "--json").stdout)
    assert status["variant"] == "baseline" and status["health"] == "ready", status

    # a killed gateway: `up` of the serving variant starts only the gateway
    serving = docker_client.containers.get(f"{stack.project}-vllm-baseline-1")
    started = serving.attrs["State"]["StartedAt"]
    docker_client.containers.get(f"{stack.project}-gateway-1").kill()
    code, result, err = _up(stack, *sleepy, "up", "baseline")
    assert code == 0, err
    serving.reload()
    assert serving.attrs["State"]["StartedAt"] == started and serving.status == "running"

    # standby turned off on a project that ran with it: the old sleep-mode container does
    # not stay awake beside the new one, and nothing is listed asleep that is not
    code, result, err = _up(stack, "--set", "gateway.hold_timeout=77", "up", "mtp")
    assert code == 0, err
    names = sorted(c.name for c in running_containers(docker_client, stack.project))
    assert names == [f"{stack.project}-vllm-1"], names
    status = json.loads(stack.run("--set", "gateway.hold_timeout=77", "status", "--json").stdout)
    assert status["variant"] == "mtp" and status["asleep"] == [] and status["awake"] == []

    history = json.loads(stack.run("history", "--json").stdout)
    outcomes = [e["outcome"] for e in history if e["kind"] == "up"]
    assert outcomes[0] == "started" and "gateway updated" in outcomes and outcomes[-1] == "swapped", history


def test_status_names_a_running_swap_instead_of_waiting_on_the_hold(sim_stack) -> None:
    stack = sim_stack
    with stack.stack_file.open("a", encoding="utf-8") as extra:
        extra.write('\n[variants.mtp-slow]\nextends = "mtp"\nenv = { SIM_LOAD_SECONDS = "15" }\n')
    code, _, err = _up(stack, "up", "baseline")
    assert code == 0, err
    slow: tuple[str, ...] = ()
    swap = stack.popen(*slow, "up", "mtp-slow")
    try:
        deadline = time.monotonic() + 60
        seen = None
        while time.monotonic() < deadline and swap.poll() is None:
            done = stack.run(*slow, "status", "--json", timeout=30)
            data = json.loads(done.stdout)
            if data.get("swap"):
                seen = data
                break
            time.sleep(0.3)
        assert seen is not None, "status never named the swap"
        assert seen["swap"]["target"] == "mtp-slow" and seen["swap"]["source"] == "baseline"
        assert "swapping baseline -> mtp-slow" in seen["swap"]["line"]
        text = stack.run(*slow, "status", timeout=30).stdout
        assert "swapping baseline -> mtp-slow" in text, text
    finally:
        _out, errs = swap.communicate(timeout=240)
    assert swap.returncode == 0, errs


class _Counting:
    """A Docker client that counts the calls that list containers."""

    def __init__(self, client) -> None:
        self._client = client
        self.listings = 0
        outer = self

        class Api:
            def __getattr__(self, name):
                if name == "containers":
                    outer.listings += 1
                return getattr(client.api, name)

        self.api = Api()

    def __getattr__(self, name):
        return getattr(self._client, name)


def test_one_swap_lists_the_projects_variant_containers_once(sim_stack, docker_client, monkeypatch) -> None:
    from composer.render.target import resolve_target
    from composer.stack.load import load_stack
    from composer.swap.swapper import up
    from tests.conftest import REPO

    code, _, err = _up(sim_stack, "up", "baseline")
    assert code == 0, err
    for name, value in sim_stack.env.items():
        monkeypatch.setenv(name, value)
    stack = load_stack(
        [REPO / "composer.toml", sim_stack.stack_file], REPO / ".env.demo", environ=sim_stack.env
    )
    counting = _Counting(docker_client)
    result = up(stack, resolve_target(stack, "mtp"), client=counting)  # type: ignore[arg-type]
    assert result.outcome == "swapped" and result.previous == "baseline"
    assert counting.listings == 1, counting.listings
