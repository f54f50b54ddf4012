"""After the gate, on the real daemon with the simulator: a crash during the probation window
rolls back; a gateway killed during a swap is started again; a gateway recreated by a swap
reaches the serving variant before it is put to sleep."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.swap.conftest import running_containers

pytestmark = pytest.mark.docker

CRASHLATE = '\n[variants.crashlate]\nextends = "mtp"\nenv = { SIM_FAIL = "crash-after:3" }\n'
SLOW = '\n[variants.slow]\nextends = "mtp"\nenv = { SIM_LOAD_SECONDS = "8" }\n'


def add_variants(stack, text: str) -> None:
    stack.stack_file.write_text(stack.stack_file.read_text() + text)


def wait_for(predicate, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.2)


def completion(stack, timeout: float = 30.0) -> int:
    """The status of one completion through the stack's port (0: no connection)."""
    try:
        reply = httpx.post(
            f"http://127.0.0.1:{stack.port}/v1/completions",
            headers={"Authorization": f"Bearer {stack.api_key}"},
            json={"model": "claude-opus-5", "prompt": "hi", "max_tokens": 2},
            timeout=timeout,
        )
    except httpx.TransportError:
        return 0
    return reply.status_code


def serving(client, project: str) -> list[str]:
    return [c.labels["vllm-composer.variant"] for c in running_containers(client, project)]


def test_a_crash_during_the_probation_rolls_back_and_status_flags_a_later_restart(sim_stack, docker_client):
    add_variants(sim_stack, CRASHLATE)
    assert sim_stack.run("up", "baseline").returncode == 0
    done = sim_stack.run("--set", "stack.probation=20s", "up", "crashlate", timeout=180)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "watching it" in done.stderr and "during its probation (" in done.stderr
    assert "rolled back to baseline, which serves again" in done.stderr
    assert "illegal memory access" in done.stderr  # its log tail
    assert serving(docker_client, sim_stack.project) == ["baseline"]
    assert completion(sim_stack) == 200
    last = json.loads(sim_stack.run("history", "--json").stdout)[-1]
    assert last["target"] == "crashlate" and last["outcome"] == "rolled back"
    # without a probation the swap succeeds, and status exits 1 once Docker restarted it
    assert sim_stack.run("up", "crashlate").returncode == 0
    assert sim_stack.run("status").returncode == 0

    def flagged() -> bool:
        return sim_stack.run("status").returncode == 1

    wait_for(flagged, 60)
    assert "crashlate restarted" in sim_stack.run("status").stdout


def test_a_gateway_killed_during_a_swap_is_started_again(sim_stack, docker_client):
    add_variants(sim_stack, SLOW)
    assert sim_stack.run("up", "baseline").returncode == 0
    record = sim_stack.run_dir() / "swap.json"
    swap = sim_stack.popen("up", "slow")

    def gating() -> bool:
        try:
            return json.loads(record.read_text())["stage"] == "gating"
        except (OSError, ValueError, KeyError):
            return False

    wait_for(gating, 60)
    gateway = docker_client.containers.list(
        filters={
            "label": [f"com.docker.compose.project={sim_stack.project}", "com.docker.compose.service=gateway"]
        }
    )[0]
    gateway.kill()
    killed = time.monotonic()
    wait_for(lambda: completion(sim_stack, timeout=30) == 200, 30)
    assert time.monotonic() - killed < 30
    out, err = swap.communicate(timeout=120)
    assert swap.returncode == 0, err
    assert "the gateway stopped during the swap (exited with code 137): starting it again" in err
    assert "slow: swapped" in out
    assert serving(docker_client, sim_stack.project) == ["slow"]


def test_a_recreated_gateway_reaches_the_serving_variant_before_putting_it_to_sleep(sim_stack, docker_client):
    text = sim_stack.stack_file.read_text(encoding="utf-8")
    sim_stack.stack_file.write_text(text.replace("[stack.env]\n", 'standby = "sleep"\n[stack.env]\n'))
    assert sim_stack.run("up", "baseline").returncode == 0
    baseline = running_containers(docker_client, sim_stack.project)[0]
    started = baseline.attrs["State"]["StartedAt"]
    for held, variant, outcome in ((250, "mtp", "swapped"), (251, "baseline", "woke")):
        done = sim_stack.run("--set", f"gateway.max_held={held}", "up", variant, "--json", timeout=180)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.splitlines()[-1])
        assert result["outcome"] == outcome and result["plan"]["gateway_update"] is True
        assert "sleep" in result["plan"]["steps"], result["plan"]
        assert "Name or service not known" not in done.stderr
    baseline.reload()
    assert baseline.attrs["State"]["StartedAt"] == started  # woken, never cold-started
    asleep = [a["variant"] for a in sim_stack.status()["asleep"]]
    assert asleep == ["mtp"]


def test_up_of_a_live_set_with_a_stopped_gateway_returns_once_the_port_answers(sim_stack, docker_client):
    add_variants(sim_stack, '\n[gateway]\nlive = ["baseline"]\n[variants.baseline]\ngpus = "0,1"\n')
    assert sim_stack.run("up", timeout=300).returncode == 0
    docker_client.containers.get(f"{sim_stack.project}-gateway-1").stop(timeout=5)
    done = sim_stack.run("up", timeout=300)
    assert done.returncode == 0, done.stderr
    assert completion(sim_stack, timeout=5) == 200  # the first request right after `up`


def _asleep(container) -> bool:
    container.reload()
    networks = container.attrs["NetworkSettings"]["Networks"].values()
    address = next(n["IPAddress"] for n in networks if n.get("IPAddress"))
    try:
        return bool(httpx.get(f"http://{address}:8000/is_sleeping", timeout=2).json()["is_sleeping"])
    except (httpx.HTTPError, ValueError, KeyError):
        return False


def test_after_an_up_killed_as_it_puts_the_serving_variant_to_sleep_the_next_up_wakes_it(
    sim_stack, docker_client
):
    text = sim_stack.stack_file.read_text(encoding="utf-8")
    sim_stack.stack_file.write_text(text.replace("[stack.env]\n", 'standby = "sleep"\n[stack.env]\n'))
    assert sim_stack.run("up", "baseline").returncode == 0
    (baseline,) = running_containers(docker_client, sim_stack.project)
    started = baseline.attrs["State"]["StartedAt"]
    swap = sim_stack.popen("up", "mtp")
    wait_for(lambda: _asleep(baseline), 60)
    swap.kill()
    swap.communicate(timeout=30)
    done = sim_stack.run("up", "baseline", "--json", timeout=180)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["outcome"] == "woke", done.stdout
    baseline.reload()
    assert baseline.attrs["State"]["StartedAt"] == started  # woken, never cold-started
    assert completion(sim_stack) == 200
