"""After the gate, on the real daemon with the simulator: a crash during the probation window
rolls back, with `up` waiting through it (`--wait-probation`) or returned already (a watcher
process keeps it, `status` and the history show it, the next `up` ends it); a gateway killed during a swap is started again; a gateway recreated by a swap
reaches the serving variant before it is put to sleep."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime

import httpx
import pytest

from tests.swap.conftest import running_containers

pytestmark = pytest.mark.docker

CRASHLATE = '\n[variants.crashlate]\nextends = "mtp"\nenv = { SIM_FAIL = "crash-after:3" }\n'
CRASHLATER = '\n[variants.crashlater]\nextends = "mtp"\nenv = { SIM_FAIL = "crash-after:8" }\n'
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


def gateway_switches(stack) -> list[dict]:
    """The switches the gateway's status page shows, newest first."""
    reply = httpx.get(
        f"http://127.0.0.1:{stack.port}/gateway/status",
        headers={"Authorization": f"Bearer {stack.api_key}"},
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    return reply.json()["switches"]


def serving(client, project: str) -> list[str]:
    return [c.labels["vllm-composer.variant"] for c in running_containers(client, project)]


def test_a_crash_during_the_probation_rolls_back_and_status_flags_a_later_restart(sim_stack, docker_client):
    add_variants(sim_stack, CRASHLATE + CRASHLATER)
    assert sim_stack.run("up", "baseline").returncode == 0
    done = sim_stack.run("--set", "stack.probation=20s", "up", "crashlate", "--wait-probation", timeout=180)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "watching it" in done.stderr and "during its probation (" in done.stderr
    assert "rolled back to baseline, which serves again" in done.stderr
    assert "illegal memory access" in done.stderr  # its log tail
    assert serving(docker_client, sim_stack.project) == ["baseline"]
    assert completion(sim_stack) == 200
    last = json.loads(sim_stack.run("history", "--json").stdout)[-1]
    assert last["target"] == "crashlate" and last["outcome"] == "rolled back"
    # without a probation the swap succeeds, and status exits 1 once Docker restarted it
    assert sim_stack.run("up", "crashlater").returncode == 0  # it crashes 8 s after its start
    assert sim_stack.run("status").returncode == 0

    def flagged() -> bool:
        return sim_stack.run("status").returncode == 1

    wait_for(flagged, 60)
    assert "crashlater restarted" in sim_stack.run("status").stdout


def history(stack) -> list[dict]:
    return json.loads(stack.run("history", "--json").stdout)


def test_up_returns_when_the_variant_serves_and_a_crash_later_in_the_window_still_rolls_back(
    sim_stack, docker_client
):
    add_variants(sim_stack, CRASHLATER)
    assert sim_stack.run("up", "baseline").returncode == 0
    done = sim_stack.run("--set", "stack.probation=90s", "up", "crashlater", "--json", timeout=180)
    returned = time.time()
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["outcome"] == "swapped" and result["probation"]["outcome"] == "running"
    until = datetime.fromisoformat(result["probation"]["until"]).timestamp()
    assert returned < until - 30  # the window goes on after `up` returned
    assert "on probation until" in done.stderr
    swapped = history(sim_stack)[-1]
    assert swapped["target"] == "crashlater" and swapped["outcome"] == "swapped" and swapped["probation"]
    shown = gateway_switches(sim_stack)[0]  # the status page shows the probation going on
    assert shown["to"] == "crashlater" and shown["probation"]["state"] in ("running", "failed"), shown
    # no command runs: the watcher sees the crash and brings baseline back
    wait_for(lambda: history(sim_stack)[-1]["outcome"] == "rolled back", 120)
    last = history(sim_stack)[-1]
    assert last["target"] == "crashlater" and "during its probation" in last["cause"]
    assert serving(docker_client, sim_stack.project) == ["baseline"]
    assert completion(sim_stack) == 200
    assert sim_stack.status()["swap"] is None  # the watcher ended and let go of the project
    ended = next(s for s in gateway_switches(sim_stack) if s["to"] == "crashlater")
    assert ended["probation"]["state"] == "failed"  # and the rollback is the switch after it
    assert gateway_switches(sim_stack)[0]["to"] == "baseline"
    text = sim_stack.run("history").stdout
    assert "swapped, then on probation" in text and "rolled back to baseline" in text
    log = (sim_stack.run_dir() / "probation.log").read_text()
    assert "rolled back to baseline" in log


def test_status_shows_a_running_probation_and_the_next_up_ends_it(sim_stack, docker_client):
    assert sim_stack.run("up", "baseline").returncode == 0
    done = sim_stack.run("--set", "stack.probation=10m", "up", "mtp", timeout=180)
    assert done.returncode == 0, done.stderr
    assert "mtp: swapped (" in done.stdout and "on probation until" in done.stdout
    shown = sim_stack.run("status")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert re.search(r"probation +mtp serves, on probation until [0-9:]{8} \(pid [0-9]+\)", shown.stdout)
    assert "rolls it back to baseline" in shown.stdout
    assert sim_stack.status()["health"] == "ready"
    moved = sim_stack.run("up", "baseline", timeout=180)
    assert moved.returncode == 0, moved.stderr
    assert "ending mtp's probation" in moved.stderr
    ended = [e for e in history(sim_stack) if e["kind"] == "probation"]
    assert ended and ended[-1]["target"] == "mtp" and ended[-1]["outcome"] == "ended early"
    assert history(sim_stack)[-1]["target"] == "baseline"
    assert serving(docker_client, sim_stack.project) == ["baseline"]


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
