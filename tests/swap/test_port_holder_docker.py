"""The port holder and the gateway serve the port together (real daemon, simulator, one stack
for the module): whatever stops or restarts the holder, the port answers again, on its own
when Docker restarts the holder, else at the next `up`, which notices a dead port at any stage
(before it plans, during a switch's gate, during a live change and its undo), mends it and goes
on. A watch probes the published port every 75 ms throughout; each test prints how many seconds
it went without an answer. No wall-clock speed is asserted: only that the port answers again
(within generous bounds that the old code, which never answered, fails)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from composer.engine.port_gap import OK, PortGap, PortWatch, probe_port
from tests.conftest import remove_project

from .conftest import FAST_STACK, Stack, module_stack

pytestmark = pytest.mark.docker

PROBE_EVERY_S = 0.075
BACK_WITHIN_S = 30.0  # generous: a loaded machine; the old code never answered again

STACK = (
    FAST_STACK
    + """[variants.mtp-slow]
extends = "mtp"
env = {{ SIM_LOAD_SECONDS = "3" }}
"""
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, docker_client, sim_images) -> Iterator[Stack]:
    made = module_stack(tmp_path_factory.mktemp("holder"), STACK, "vcthold")
    try:
        yield made
    finally:
        remove_project(docker_client, made.project)


def _holder(stack: Stack, docker_client):
    return docker_client.containers.get(f"{stack.project}-gateway-port-1")


def _gateway(stack: Stack, docker_client):
    return docker_client.containers.get(f"{stack.project}-gateway-1")


def _crash(container) -> None:
    """The container's main process ends on its own (not `docker stop` or `docker kill`, which
    Docker's restart policy respects); returns once Docker started it again."""
    before = container.attrs["State"]["StartedAt"]
    container.exec_run(["python3", "-c", "import os, signal; os.kill(1, signal.SIGTERM)"])
    deadline = time.monotonic() + BACK_WITHIN_S
    while container.attrs["State"]["StartedAt"] == before and time.monotonic() < deadline:
        time.sleep(0.05)
        container.reload()


def _answers_within(stack: Stack, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if probe_port("127.0.0.1", stack.port) == OK:
            return True
        time.sleep(PROBE_EVERY_S)
    return False


def _up(stack: Stack, *args: str):
    done = stack.run("up", *args, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _answers_within(stack, 10), "the port does not answer after `up`"
    return done


def _clean(said: str) -> None:
    """No raw Docker error nor a traceback reached the user."""
    assert "Client Error" not in said and "Traceback" not in said, said


def _started(docker_client, project: str, variant: str) -> bool:
    """A container of `variant` exists in `project`, within a minute."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = docker_client.containers.list(  # sparse: no inspection of a container going away
            all=True, sparse=True, filters={"label": [f"com.docker.compose.project={project}"]}
        )
        if any((c.attrs.get("Labels") or {}).get("vllm-composer.variant") == variant for c in found):
            return True
        time.sleep(0.1)
    return False


def _finish(up) -> tuple[int, str]:
    """A backgrounded `up`'s exit code and output, once it ends (killed after 150 s)."""
    try:
        out, err = up.communicate(timeout=150)
    finally:
        up.kill()
    return up.returncode, out + err


def _crash_and_wait(stack: Stack, container) -> tuple[bool, PortGap]:
    """Crash `container` (see `_crash`) under the watch; whether the port answered again within
    BACK_WITHIN_S with nobody running a command, and what the watch saw."""
    with PortWatch(f"http://127.0.0.1:{stack.port}", interval=PROBE_EVERY_S) as watch:
        time.sleep(0.3)
        _crash(container)
        back = _answers_within(stack, BACK_WITHIN_S)
        return back, watch.stop(wait_served=2.0)


def test_a_crashed_port_holder_brings_the_port_back_on_its_own(stack, docker_client) -> None:
    _up(stack, "baseline")
    holder = _holder(stack, docker_client)
    back, gap = _crash_and_wait(stack, holder)
    print(f"holder crashed, nothing run: {gap.line()}")
    holder.reload()
    assert holder.attrs["RestartCount"] >= 1  # Docker restarted it: the crash happened
    assert back, f"the port does not answer {BACK_WITHIN_S:.0f}s after the holder's restart ({gap.line()})"
    assert gap.failed > 0  # the port was down meanwhile: the watch saw the fault

    back, gap = _crash_and_wait(stack, _gateway(stack, docker_client))  # Docker restarts it in place
    print(f"gateway crashed, nothing run: {gap.line()}")
    assert back, f"the port does not answer {BACK_WITHIN_S:.0f}s after the gateway's restart ({gap.line()})"


def test_up_repairs_a_stopped_holder_before_it_plans(stack, docker_client) -> None:
    _up(stack, "baseline", "mtp")  # a live set
    _holder(stack, docker_client).kill()  # `docker kill`: Docker does not restart it
    assert not _answers_within(stack, 1.0)
    with PortWatch(f"http://127.0.0.1:{stack.port}", interval=PROBE_EVERY_S) as watch:
        done = stack.run("up", "baseline", "mtp", timeout=180)
        gap = watch.stop(wait_served=2.0)
    print(f"live set, holder killed, then `up baseline mtp`: exit {done.returncode}; {gap.line()}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the published port was dead" in done.stdout + done.stderr
    _clean(done.stdout + done.stderr)
    assert _answers_within(stack, 5), "`up` ended but the port does not answer"


def test_a_holder_killed_during_a_switch_is_mended_and_the_switch_goes_on(stack, docker_client) -> None:
    _up(stack, "baseline")
    with PortWatch(f"http://127.0.0.1:{stack.port}", interval=PROBE_EVERY_S) as watch:
        up = stack.popen("up", "mtp-slow", "--timeout", "120")
        try:
            assert _started(docker_client, stack.project, "mtp-slow")
            _holder(stack, docker_client).kill()  # while mtp-slow loads: the gate probes through the port
        finally:
            code, said = _finish(up)  # never left running into the next test
        gap = watch.stop(wait_served=2.0)
    print(f"holder killed during a switch: exit {code}; {gap.line()}")
    assert code == 0, said
    assert "the published port was dead" in said
    _clean(said)
    assert _answers_within(stack, 5)
    assert stack.status()["variant"] == "mtp-slow"


def test_a_holder_and_gateway_killed_during_a_live_change_leave_a_serving_port(stack, docker_client) -> None:
    _up(stack, "baseline")
    with PortWatch(f"http://127.0.0.1:{stack.port}", interval=PROBE_EVERY_S) as watch:
        up = stack.popen("up", "baseline", "mtp-slow", "--timeout", "120")
        try:
            assert _started(docker_client, stack.project, "mtp-slow")
            _holder(stack, docker_client).kill()  # while the new member loads, reached directly
            _gateway(stack, docker_client).kill()
        finally:
            code, said = _finish(up)  # never left running into the next test
        gap = watch.stop(wait_served=2.0)
    print(f"holder and gateway killed during a live change: exit {code}; {gap.line()}")
    assert code == 0, said  # mended before the gateway is told the new set: the change completes
    assert "the published port is dead" in said
    _clean(said)
    assert _answers_within(stack, 5), "the port does not answer after `up` ended"


def test_a_gateway_docker_could_not_start_before_its_holder_is_named_and_mended(stack, docker_client) -> None:
    """After a daemon restart or a reboot Docker starts a project's containers in no order: a
    gateway started before its port holder fails ("cannot join network of a non running
    container") and Docker never retries it. The same state made by hand: both stopped, the
    gateway started first (refused), then the holder."""
    _up(stack, "baseline")
    variant = docker_client.containers.get(f"{stack.project}-vllm-1")
    started = variant.attrs["State"]["StartedAt"]
    holder, gateway = _holder(stack, docker_client), _gateway(stack, docker_client)
    gateway.kill()
    holder.kill()
    with pytest.raises(Exception, match="non running container"):
        gateway.start()
    holder.start()
    assert not _answers_within(stack, 1.0)

    shown = stack.run("status")
    print(f"status: exit {shown.returncode}\n{shown.stdout}")
    assert shown.returncode == 1, shown.stdout + shown.stderr  # what runs is out of clients' reach
    assert "port holder was not running yet" in shown.stdout
    assert "`compose-spec up VARIANT` starts it" in shown.stdout
    _clean(shown.stdout + shown.stderr)

    planned = stack.run("up", "baseline", "--dry-run")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "the gateway is not running" in planned.stdout + planned.stderr
    assert "Stop:" not in planned.stdout  # the variant serves on: the plan never restarts it

    _up(stack, "baseline")
    variant.reload()
    assert variant.attrs["State"]["StartedAt"] == started  # only the gateway started
    assert stack.run("status").returncode == 0
