"""A swap under attack, on the real daemon with the simulator: the gateway restarted during
the gate, `up` killed between the sleep and the wake, a sleeping container crashed and
brought back awake by Docker. Each ends truthfully: something serves, and what `up` and
`status` say is what runs."""

from __future__ import annotations

import json
import signal
import time

import httpx
import pytest

pytestmark = pytest.mark.docker


def _up(stack, *args: str, timeout: float = 240) -> tuple[int, dict, str]:
    done = stack.run(*args, "--json", timeout=timeout)
    lines = done.stdout.strip().splitlines()
    return done.returncode, json.loads(lines[-1]) if lines else {}, done.stderr


def _wait_for_stage(stack, words: str, swap, limit: float = 60) -> None:
    """Poll `status` until the running swap's line names `words`."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and swap.poll() is None:
        line = (json.loads(stack.run("status", "--json", timeout=30).stdout).get("swap") or {}).get(
            "line", ""
        )
        if words in line:
            return
        time.sleep(0.2)
    raise AssertionError(f"the swap never reached {words!r}")


def _served_name(stack) -> str:
    """The stack's served name (status names one only while a variant serves)."""
    done = stack.run("config", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["stack"]["served_model_name"]


def _complete(stack, timeout: float = 120) -> httpx.Response:
    served = _served_name(stack)
    body = {"model": served, "prompt": "hi", "max_tokens": 4}
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    url = f"http://127.0.0.1:{stack.port}/v1/completions"
    return httpx.post(url, json=body, headers=headers, timeout=timeout)


def _serves(stack, limit: float = 30) -> httpx.Response:
    """A completion through the gateway, asked again until it answers 200 or `limit` passes."""
    deadline = time.monotonic() + limit
    while True:
        try:
            answer = _complete(stack, timeout=30)
        except httpx.HTTPError:
            answer = None
        if (answer is not None and answer.status_code == 200) or time.monotonic() > deadline:
            assert answer is not None and answer.status_code == 200, answer and answer.text
            return answer
        time.sleep(0.5)


def test_a_gateway_restarted_during_the_gate_ends_truthfully(sim_stack, docker_client) -> None:
    stack = sim_stack
    with stack.stack_file.open("a", encoding="utf-8") as extra:
        # loading for 20 s: long enough for `status` (a CLI run each time, slow on a busy
        # machine) to see the gate before the swap ends
        extra.write('\n[variants.mtp-slow]\nextends = "mtp"\nenv = { SIM_LOAD_SECONDS = "20" }\n')
    code, _, err = _up(stack, "up", "baseline")
    assert code == 0, err
    swap = stack.popen("up", "mtp-slow", "--json")
    try:
        _wait_for_stage(stack, "gating", swap)
        docker_client.containers.get(f"{stack.project}-gateway-1").restart(timeout=5)
    finally:
        out, errs = swap.communicate(timeout=240)
    said = out + errs
    assert "rollback to baseline failed" not in said, said  # never while something serves
    status = stack.status()
    if swap.returncode == 0:
        assert json.loads(out.strip().splitlines()[-1])["outcome"] == "swapped", out
        assert status["variant"] == "mtp-slow", status
    else:
        assert "rolled back to baseline, which serves again" in errs, errs
        assert status["variant"] == "baseline", status
    _serves(stack)


def test_up_killed_between_sleep_and_wake_and_a_crashed_sleeper(sim_stack, docker_client) -> None:
    stack = sim_stack
    text = stack.stack_file.read_text(encoding="utf-8")
    stack.stack_file.write_text(
        text.replace("[stack.env]\n", 'standby = "sleep"\n[stack.env]\nSIM_SLEEP_FIXED_SECONDS = "60"\n')
        + '\n[gateway]\nhold_timeout = "5s"\n',
        encoding="utf-8",
    )
    code, _, err = _up(stack, "up", "mtp")
    assert code == 0, err

    # `up baseline` killed while mtp falls asleep (6 s here): the gateway routes to a backend
    # that sleeps; it must never forward to it (readiness asks /is_sleeping), nor hang
    swap = stack.popen("up", "baseline", "--json")
    try:
        _wait_for_stage(stack, "putting the serving variant to sleep", swap)
        swap.send_signal(signal.SIGKILL)
    finally:
        swap.communicate(timeout=60)
    from composer.gateway.host.client import GatewayControl

    gateway = GatewayControl(docker_client.containers.get(f"{stack.project}-gateway-1"))
    mtp_url = f"http://{stack.project}-vllm-mtp-1:8000"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and gateway.look([mtp_url])[1].get(mtp_url) is not True:
        time.sleep(0.5)
    assert gateway.look([mtp_url])[1].get(mtp_url) is True  # the sleep finished without `up`
    answer = _complete(stack, timeout=150)  # held while the dead swap's lease lasts, then refused
    assert answer.status_code in (429, 503), (answer.status_code, answer.text)
    code, _, err = _up(stack, "up", "baseline")
    assert code == 0, err
    _serves(stack, limit=90)  # the dead swap's hold holds new requests until its lease (60 s) ends

    # mtp's sleeping container crashes and Docker brings it back, awake: status says awake and
    # not serving; the next `up mtp` routes to it without starting it again
    sleeper = docker_client.containers.get(f"{stack.project}-vllm-mtp-1")
    sleeper.kill()
    sleeper.start()
    status = stack.status_until(lambda s: s.get("awake"), 60)
    assert [a["variant"] for a in status["awake"]] == ["mtp"] and status["asleep"] == [], status
    assert status["variant"] == "baseline", status
    sleeper.reload()
    started = sleeper.attrs["State"]["StartedAt"]
    code, _, err = _up(stack, "up", "mtp")
    assert code == 0, err
    sleeper.reload()
    assert sleeper.attrs["State"]["StartedAt"] == started, "the awake container was started again"
    assert stack.status()["variant"] == "mtp"
    _serves(stack)
