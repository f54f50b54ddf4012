"""Sleep standby on the real daemon with the simulator: wakes instead of cold starts."""

from __future__ import annotations

import json

import pytest

from tests.swap.conftest import running_containers

pytestmark = pytest.mark.docker

COLD_START_S = 100  # simulated seconds; SIM_TIME_SCALE = 10 makes it 10 s of real time

FAILING_WAKES = """
[variants.mtp-wakefail]
extends = "mtp"
env = { SIM_FAIL = "wake-fail" }

[variants.mtp-zero]
extends = "mtp"
env = { SIM_FAIL = "wake-zero-acceptance" }
"""


@pytest.fixture
def standby_stack(sim_stack):
    """The simulator stack with sleep standby for every variant and a slow cold start."""
    text = sim_stack.stack_file.read_text(encoding="utf-8")
    text = text.replace(
        "[stack.env]\n", f'standby = "sleep"\n[stack.env]\nSIM_COLD_START_SECONDS = "{COLD_START_S}"\n'
    ).replace('SIM_TIME_SCALE = "20"', 'SIM_TIME_SCALE = "10"')
    sim_stack.stack_file.write_text(text + FAILING_WAKES, encoding="utf-8")
    return sim_stack


def _up(stack, variant: str, *flags: str) -> tuple[int, dict, str]:
    done = stack.run(*flags, "up", variant, "--json", timeout=300)
    lines = done.stdout.strip().splitlines()
    return done.returncode, json.loads(lines[-1]) if lines else {}, done.stderr


def _started_at(client, project: str) -> dict[str, tuple[str, str]]:
    """Container ID and start time of each running variant container, by variant."""
    found = {}
    for container in running_containers(client, project):
        container.reload()
        variant = container.labels["vllm-composer.variant"]
        found[variant] = (container.id, container.attrs["State"]["StartedAt"])
    return found


def test_mtp_baseline_mtp_baseline_wakes_the_second_time(standby_stack, docker_client) -> None:
    outcomes, first_start = [], {}
    for variant in ("mtp", "baseline", "mtp", "baseline"):
        code, result, err = _up(standby_stack, variant)
        assert code == 0, err
        outcomes.append((result["outcome"], result["timings"]))
        for name, started in _started_at(docker_client, standby_stack.project).items():
            first_start.setdefault(name, started)
    assert [o for o, _ in outcomes] == ["started", "swapped", "woke", "woke"], outcomes
    # a wake is the container that was put to sleep, never recreated nor restarted (no cold start);
    # how much faster a wake is than a cold switch is measured by benchmarks/bench_standby.py
    assert _started_at(docker_client, standby_stack.project) == first_start
    assert sorted(first_start) == ["baseline", "mtp"]
    for _, timings in outcomes[2:]:
        assert "wake" in timings and "stop" not in timings, timings
    # one serving container, one asleep; both belong to the project
    containers = running_containers(docker_client, standby_stack.project)
    assert len(containers) == 2
    weights = ("--set", "variants.mtp.weights_bytes=13.5G")
    done = standby_stack.run(*weights, "status", "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["variant"] == "baseline"
    assert status["asleep"] == [
        {
            "variant": "mtp",
            "container": f"{standby_stack.project}-vllm-mtp-1",
            "state": "asleep",
            "is_sleeping": True,  # its own /is_sleeping answer, not the gateway's route
            "restart_policy": "no",  # a reboot brings back only the serving variant
            "host_memory_bytes": 4 * int(13.5 * 2**30),  # each of the 4 GPUs (tensor_parallel_size)
        }
    ]
    policies = {c.name: c.attrs["HostConfig"]["RestartPolicy"]["Name"] for c in containers}
    assert policies[f"{standby_stack.project}-vllm-baseline-1"] == "unless-stopped"
    _gateway_restart_serves_again_without_up(standby_stack, docker_client)
    _a_sleeper_restarted_by_hand_is_awake_and_the_next_up_handles_it(standby_stack, docker_client)
    # a third sleeper that does not fit is refused with the numbers, before anything stops
    tight = ("--set", "stack.gpu_memory_bytes=16G", "--set", "variants.dflash2.weights_bytes=13.5G")
    done = standby_stack.run(*tight, "up", "dflash2", timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "sleep standby does not fit" in done.stderr and "above the GPU's 16.0 GiB" in done.stderr
    assert standby_stack.status()["variant"] == "baseline"
    assert len(running_containers(docker_client, standby_stack.project)) == 2
    # a new gateway (the fix for a dead published port) routes to the serving sleeper again,
    # and neither variant is restarted (the sleeper was restarted by hand above: compare with now)
    before_recreate = _started_at(docker_client, standby_stack.project)
    done = standby_stack.run("up", "--recreate-gateway")
    assert done.returncode == 0 and "baseline serves through it again" in done.stdout, done.stderr
    after = standby_stack.status()
    assert after["variant"] == "baseline" and after["health"] == "ready", after
    assert [a["variant"] for a in after["asleep"]] == ["mtp"]
    assert _started_at(docker_client, standby_stack.project) == before_recreate
    # with standby_fallback = "stop", a sleeper that does not fit is stopped instead, and up says so
    fallback = ("--set", "stack.gpu_memory_bytes=21G", "--set", "variants.dflash2.weights_bytes=13.5G")
    done = standby_stack.run(*fallback, "--set", "stack.standby_fallback=stop", "up", "dflash2", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "baseline is stopped instead of put to sleep" in done.stderr, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["outcome"] == "swapped"
    names = sorted(c.name for c in running_containers(docker_client, standby_stack.project))
    assert names == [f"{standby_stack.project}-vllm-dflash2-1", f"{standby_stack.project}-vllm-mtp-1"]
    # down VARIANT: the serving one is refused while another sleeps; the sleeping one stops
    done = standby_stack.run("down", "dflash2")
    assert done.returncode == 1 and "leaves nothing serving while mtp sleep" in done.stderr, done.stderr
    done = standby_stack.run("down", "mtp")
    assert done.returncode == 0 and "stopped mtp (it was asleep" in done.stdout, done.stdout + done.stderr
    assert [c.name for c in running_containers(docker_client, standby_stack.project)] == [
        f"{standby_stack.project}-vllm-dflash2-1"
    ]
    assert standby_stack.status()["asleep"] == []
    done = standby_stack.run("down")
    assert done.returncode == 0, done.stderr
    assert running_containers(docker_client, standby_stack.project) == []


def _gateway_restart_serves_again_without_up(stack, client) -> None:
    """`docker restart` of the gateway (a reboot, a crash): it finds the awake serving
    container itself and serves again without `up` (the old gateway forwarded to `vllm`, a
    service that does not exist under sleep standby, until `up`); status names the serving
    and the asleep variant. The deadline is generous (no timing assertion under CI load)."""
    import time

    import httpx

    served = stack.status()["served_model_name"]
    client.containers.get(f"{stack.project}-gateway-1").restart(timeout=5)
    url = f"http://127.0.0.1:{stack.port}/v1/completions"
    body = {"model": served, "prompt": "hi", "max_tokens": 1}
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    deadline, answer = time.monotonic() + 60.0, None
    while time.monotonic() < deadline:
        try:
            answer = httpx.post(url, json=body, headers=headers, timeout=deadline - time.monotonic() + 0.5)
        except httpx.HTTPError:
            time.sleep(0.2)
            continue
        if answer.status_code == 200:
            break
    assert answer is not None and answer.status_code == 200, answer and answer.text
    status = stack.status()
    assert status["variant"] == "baseline" and [a["variant"] for a in status["asleep"]] == ["mtp"]
    assert status["gateway"]["upstream"].endswith("-vllm-baseline-1:8000")


def _a_sleeper_restarted_by_hand_is_awake_and_the_next_up_handles_it(stack, client) -> None:
    """`docker restart` of the sleeper (or Docker restarting it after a crash) brings it back
    awake: status says so (not `asleep`), and `up mtp` routes to it without a new start."""
    sleeper = client.containers.get(f"{stack.project}-vllm-mtp-1")
    sleeper.restart(timeout=5)
    status = stack.status_until(lambda s: s.get("awake"), 120)
    assert [a["variant"] for a in status["awake"]] == ["mtp"] and status["asleep"] == [], status
    assert status["variant"] == "baseline"
    sleeper.reload()
    started = sleeper.attrs["State"]["StartedAt"]
    code, result, err = _up(stack, "mtp")
    assert code == 0, err
    assert "adopt" in result["plan"]["steps"] and "start" not in result["plan"]["steps"], result
    sleeper.reload()
    assert sleeper.attrs["State"]["StartedAt"] == started  # the same process serves
    assert sleeper.attrs["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    code, result, err = _up(stack, "baseline")
    assert code == 0 and result["outcome"] == "woke", err
    status = stack.status()
    assert status["variant"] == "baseline" and [a["variant"] for a in status["asleep"]] == ["mtp"]
    # a gateway setting changed under sleep standby: applied in place, the sleeper stays
    # asleep (it was deleted, with an IndexError, before)
    code, result, err = _up(stack, "baseline", "--set", "gateway.hold_timeout=77")
    assert code == 0 and result["outcome"] == "gateway updated", err
    status = stack.status()
    assert status["variant"] == "baseline" and [a["variant"] for a in status["asleep"]] == ["mtp"]


@pytest.mark.parametrize(
    ("variant", "cause"),
    [("mtp-wakefail", "wake"), ("mtp-zero", "accepts 0.00 of its draft tokens")],
)
def test_a_failed_wake_rolls_back_to_the_variant_that_served(
    standby_stack, docker_client, variant: str, cause: str
) -> None:
    for step in (variant, "baseline"):
        code, _, err = _up(standby_stack, step)
        assert code == 0, err
    code, result, err = _up(standby_stack, variant)
    assert code == 1, (result, err)
    message = json.dumps(result) + err
    assert cause in message, message
    assert "rolled back to baseline" in message, message
    code, result, err = _up(standby_stack, "baseline")
    assert code == 0 and result["outcome"] == "unchanged", (result, err)


def test_with_the_gateway_stopped_status_ls_down_and_up_agree(standby_stack, docker_client) -> None:
    for variant in ("mtp", "baseline"):
        code, _, err = _up(standby_stack, variant)
        assert code == 0, err
    labels = [f"com.docker.compose.project={standby_stack.project}", "vllm-composer.role=gateway"]
    (gateway,) = docker_client.containers.list(filters={"label": labels})
    gateway.stop()
    # Each sleep-mode container is asked itself: baseline serves, mtp sleeps, in every command.
    status = standby_stack.run("status", "--json")
    data = json.loads(status.stdout)
    assert data["variant"] == "baseline", status.stdout
    assert [a["variant"] for a in data["asleep"]] == ["mtp"], status.stdout
    listed = standby_stack.run("ls", "--json")
    assert [r["variant"] for r in json.loads(listed.stdout) if r["serving"]] == ["baseline"], listed.stdout
    refused = standby_stack.run("down", "baseline")
    assert refused.returncode == 1 and "baseline serves" in refused.stderr, refused.stderr
    code, result, err = _up(standby_stack, "baseline")
    assert code == 0, err
    assert result["outcome"] not in ("woke", "swapped", "started"), result
    asleep = standby_stack.run("down", "mtp")
    assert asleep.returncode == 0 and "it was asleep" in asleep.stdout, asleep.stdout + asleep.stderr
    assert [
        c.labels["vllm-composer.variant"] for c in running_containers(docker_client, standby_stack.project)
    ] == ["baseline"]
