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
    from composer.gateway.host.client import GatewayControl

    raw = GatewayControl(client.containers.get(f"{project}-gateway-1")).state().raw
    state = {k: raw[k] for k in ("held", "inflight", "holds", "routes_total", "generation")}
    return {**state, "upstreams": [(u["name"], u["variant"], u["url"]) for u in raw["upstreams"]]}


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
        assert ("nothing to change" in done.stdout) == (args == ("up", "mtp")), done.stdout
    code, planned, err = _up(stack, "--set", "gateway.hold_timeout=77", "up", "mtp", "--dry-run")
    assert code == 0 and planned["outcome"] == "planned", planned
    assert planned["plan"]["gateway_in_place"] == ["GATEWAY_HOLD_TIMEOUT"], planned  # no new container
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

    # a [gateway] setting changed while a stream is in flight: applied in place, never cut
    out: dict = {}
    streaming = threading.Thread(target=_stream, args=(stack, served, out))
    streaming.start()
    time.sleep(0.5)
    code, result, err = _up(stack, "--set", "gateway.hold_timeout=77", "up", "mtp")
    streaming.join(timeout=120)
    assert code == 0, err
    assert result["outcome"] == "gateway updated", result
    assert out.get("done") and out.get("status") == 200 and out.get("chunks", 0) > 1, out
    assert result["drained"] is None, result  # nothing drained: the same gateway serves on
    status = httpx.get(
        f"http://127.0.0.1:{stack.port}/gateway/status", headers={"Authorization": f"Bearer {stack.api_key}"}
    ).json()
    assert (
        status["settings"]["GATEWAY_HOLD_TIMEOUT"] == 77
    )  # the new setting is applied, the variant unchanged
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


class _Recorder:
    """Docker's listings of containers (outside doctor's preflight checks), every Docker API
    call and every `docker exec`, recorded at the SDK's HTTP layer during one command."""

    def __init__(self) -> None:
        self.listings: list[str] = []
        self.preflight_listings = 0
        self.calls = 0
        self.execs = 0

    def install(self, monkeypatch) -> None:
        import traceback

        from docker.api.client import APIClient

        recorder = self
        for verb in ("_get", "_post", "_delete", "_put"):
            original = getattr(APIClient, verb)

            def recorded(self, url, *args, _original=original, **kwargs):
                recorder.calls += 1
                if url.endswith("/exec"):
                    recorder.execs += 1
                if url.endswith("/containers/json"):
                    stack = "".join(traceback.format_stack(limit=40))
                    if "composer/doctor/" in stack:
                        recorder.preflight_listings += 1
                    else:
                        recorder.listings.append(stack)
                return _original(self, url, *args, **kwargs)

            monkeypatch.setattr(APIClient, verb, recorded)


VARIANT_PARAMETERS = ("variant", "target", "variant_name")


def _carries(name: str, value: object, variant: str) -> bool:
    """Whether a call's argument is the variant: a parameter naming it, or an object naming it."""
    if isinstance(value, str):
        return name in VARIANT_PARAMETERS and value == variant
    for attribute in ("name", "variant", "target"):
        try:
            if getattr(value, attribute, None) == variant:
                return True
        except Exception:
            continue
    return False


class _VariantTrail:
    """The calls that carry the variant, below the CLI's `up`: the modules they enter, and the
    calls that re-enter a module already on the call chain below them (a return to an earlier
    module: A -> B -> A)."""

    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.chain: list[str] = []  # the composer modules of the frames on the stack now
        self.modules: list[str] = []  # modules entered by calls carrying the variant, in order
        self.returns: list[tuple[str, ...]] = []

    def __call__(self, frame, event, _arg) -> None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("composer.") or module == "composer._exports":
            return
        if event == "return":
            if self.chain:
                self.chain.pop()
            return
        if event != "call":
            return
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        below = [m for i, m in enumerate(self.chain) if i == 0 or self.chain[i - 1] != m]
        self.chain.append(module)
        if not any(
            _carries(n, frame.f_locals.get(n), self.variant) for n in names if n not in ("self", "cls")
        ):
            return
        if not self.modules or self.modules[-1] != module:
            self.modules.append(module)
        if below and below[-1] != module and module in below:
            self.returns.append((*below, module))


def test_one_swap_lists_the_projects_containers_once_through_few_modules(sim_stack, monkeypatch) -> None:
    """`up mtp` in process, from the CLI's `up` down to the handlers: Docker's container list is
    read once (doctor's preflight reads the swap's snapshot), and the variant passes through
    at most 16 modules with at most 4 returns to an earlier one."""
    import sys

    from click.testing import CliRunner

    from composer.cli import main

    code, _, err = _up(sim_stack, "up", "baseline")
    assert code == 0, err
    for name, value in sim_stack.env.items():
        monkeypatch.setenv(name, value)
    recorder = _Recorder()
    recorder.install(monkeypatch)
    trail = _VariantTrail("mtp")
    args = sim_stack.args("up", "mtp", "--json")[3:]  # without `python -m composer`
    sys.setprofile(trail)
    try:
        done = CliRunner().invoke(main, args, env=sim_stack.env, catch_exceptions=False)
    finally:
        sys.setprofile(None)
    assert done.exit_code == 0, done.output
    result = json.loads(done.output.strip().splitlines()[-1])
    assert result["outcome"] == "swapped" and result["previous"] == "baseline", result
    assert len(recorder.listings) == 1, "\n\n".join(recorder.listings)
    assert recorder.preflight_listings == 0  # doctor's port check reads the snapshot
    assert trail.modules[0].startswith("composer.cli") and "composer.swap.transaction" in trail.modules, (
        trail.modules
    )
    assert len(trail.returns) <= 4, trail.returns  # today: none
    # The variant is resolved once (render: spec, target, the run file) and the swap (swapper,
    # plan, its typed operations, the runner, transaction's handlers, holding, the gateway's
    # client, the gate) carries it; doctor's preflight reads it in its registry only (the checks read the
    # variant's facts), capacity in its planner and its model (the formulas take numbers), the
    # journal takes the plan's data; up's options and report sit beside the command
    # (cli/swap). At most 17 modules: the operations (`composer.swap.ops`) carry the
    # containers by name, so nothing below the plan resolves the variant again.
    assert len(set(trail.modules)) <= 17, " ".join(sorted(set(trail.modules)))
