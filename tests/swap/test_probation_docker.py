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
    image = docker_client.containers.get(f"{sim_stack.project}-gateway-1").attrs["Config"]["Image"]
    other = f"{image.rsplit(':', 1)[0]}:{sim_stack.project}"  # the same image by another name
    docker_client.images.get(image).tag(other)
    try:  # another image name needs a new gateway container (a setting alone is applied in place)
        for name, variant, outcome in ((other, "mtp", "swapped"), (image, "baseline", "woke")):
            done = sim_stack.run("--set", f"gateway.image={name}", "up", variant, "--json", timeout=180)
            assert done.returncode == 0, done.stderr
            result = json.loads(done.stdout.splitlines()[-1])
            assert result["outcome"] == outcome and result["plan"]["gateway_update"] is True
            assert "sleep" in result["plan"]["steps"], result["plan"]
            assert "Name or service not known" not in done.stderr
    finally:
        docker_client.images.remove(other)
    baseline.reload()
    assert baseline.attrs["State"]["StartedAt"] == started  # woken, never cold-started
    asleep = [a["variant"] for a in sim_stack.status()["asleep"]]
    assert asleep == ["mtp"]
