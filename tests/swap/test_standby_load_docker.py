"""Sleep standby under the gateway's 16-client streaming load, on the real daemon with the
simulator: mtp -> baseline -> mtp -> baseline refuses no request and cuts no stream, and
each wake is a small share of a cold start."""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest

from tests.swap.test_gateway_docker import Load

pytestmark = pytest.mark.docker

COLD_START_S = 100.0  # simulated seconds of a cold start (the reference box)
TIME_SCALE = 4.0  # the simulator runs 4x faster than the reference box: 25 s of real time
WAKE_LINE = re.compile(r"It took ([0-9.]+) seconds to wake up tags")


@pytest.fixture
def loaded_standby_stack(sim_stack):
    """Every variant on sleep standby, with a 100 s simulated cold start."""
    text = sim_stack.stack_file.read_text(encoding="utf-8")
    text = text.replace(
        "[stack.env]\n",
        f'standby = "sleep"\n[stack.env]\nSIM_COLD_START_SECONDS = "{COLD_START_S:g}"\n',
    ).replace('SIM_TIME_SCALE = "20"', f'SIM_TIME_SCALE = "{TIME_SCALE:g}"')
    sim_stack.stack_file.write_text(text, encoding="utf-8")
    return sim_stack


def _up(stack, variant: str) -> dict:
    done = stack.run("up", variant, "--json", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _engine_wake_seconds(docker_client, container: str) -> float:
    """The simulator's own last wake duration (real seconds), from its vLLM log line."""
    log = docker_client.containers.get(container).logs().decode("utf-8", "replace")
    found = WAKE_LINE.findall(log)
    assert found, f"no wake line in {container}'s log"
    return float(found[-1])


def _counter(metrics: str, line_start: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{line_start} missing from /gateway/metrics")


def test_sleep_standby_switches_under_16_streams_refuse_and_cut_nothing(
    loaded_standby_stack, docker_client
) -> None:
    stack = loaded_standby_stack
    first = _up(stack, "mtp")  # the gateway starts with the first variant: clients come after it
    assert first["outcome"] == "started", first
    results: list[tuple[str, dict]] = []
    with Load(f"http://127.0.0.1:{stack.port}", stack.api_key, clients=16) as load:
        time.sleep(2)
        for variant in ("baseline", "mtp", "baseline"):
            results.append((variant, _up(stack, variant)))
            time.sleep(1.5)
    for variant, result in results:
        print(variant, result["outcome"], {k: round(v, 2) for k, v in result["timings"].items()})
    assert [r["outcome"] for _, r in results] == ["swapped", "woke", "woke"], results
    finished = [o for o in load.outcomes if o.status or o.error]
    assert len(finished) > 100, f"the load made only {len(finished)} requests"
    assert load.refused() == [], load.refused()[:5]
    assert load.cut() == [], load.cut()[:5]
    cold_wall = min(first["timings"]["start_to_ready"], results[0][1]["timings"]["start_to_ready"])
    assert cold_wall * TIME_SCALE >= 20.0, cold_wall  # a cold start of at least 20 simulated seconds
    engine_wakes = []
    for variant, result in results[1:]:
        wake_wall = result["timings"]["wake"]  # /wake_up until the gate passed, on this machine
        assert wake_wall <= cold_wall / 5, (variant, wake_wall, cold_wall)
        engine = _engine_wake_seconds(docker_client, f"{stack.project}-vllm-{variant}-1")
        engine_wakes.append(round(engine * TIME_SCALE, 2))
        assert engine * TIME_SCALE <= 3.0, (variant, engine * TIME_SCALE)  # simulated seconds
        assert result["drained"]["cut"] == 0
    metrics = httpx.get(f"http://127.0.0.1:{stack.port}/gateway/metrics", timeout=10).text
    assert _counter(metrics, 'gateway_sleeps_total{result="ok"}') == 3
    assert _counter(metrics, 'gateway_wakes_total{result="ok"}') == 2
    assert _counter(metrics, 'gateway_wakes_total{result="failed"}') == 0
    status = httpx.get(
        f"http://127.0.0.1:{stack.port}/gateway/status",
        headers={"Authorization": f"Bearer {stack.api_key}"},
        timeout=10,
    ).json()
    assert status["serving"] == ["baseline"] and status["sleeping"] == ["mtp"], status
    last = status["switches"][0]
    assert (last["from"], last["to"], last["outcome"], last["detail"]) == ("mtp", "baseline", "ok", "woke")
    assert [st["stage"] for st in last["stages"]] == ["drain", "stop", "sleep", "start", "wake", "gate"], last
    print(
        "cold start (wall):",
        round(cold_wall, 2),
        "wakes (wall):",
        [round(r["timings"]["wake"], 2) for _, r in results[1:]],
        "engine wakes (simulated):",
        engine_wakes,
        "requests:",
        len(finished),
    )
