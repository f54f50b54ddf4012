"""Concurrent swaps are serialised; kill -9 mid-swap leaves a truthful, recoverable state."""

from __future__ import annotations

import random
import signal
import threading
import time

import pytest

from tests.swap.conftest import running_containers

pytestmark = pytest.mark.docker


class RunningWatch(threading.Thread):
    """Samples the project's running containers until stopped; records the maximum."""

    def __init__(self, client, project: str) -> None:
        super().__init__(daemon=True)
        self.client, self.project = client, project
        self.max_running = 0
        self.samples = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.max_running = max(self.max_running, len(running_containers(self.client, self.project)))
            self.samples += 1
            time.sleep(0.05)

    def stop(self) -> None:
        self.stop_event.set()
        self.join()


def test_two_concurrent_ups_are_serialised(sim_stack, docker_client):
    watch = RunningWatch(docker_client, sim_stack.project)
    watch.start()
    first = sim_stack.popen("up", "mtp")
    assert holds_the_lock(
        sim_stack.project, first.pid
    )  # a condition, not a time: under load start-up is slow
    second = sim_stack.popen("up", "baseline")
    assert_took_turns(first, second, watch, docker_client, sim_stack.project)


def assert_took_turns(first, second, watch: RunningWatch, docker_client, project: str) -> None:
    """Two `up`s, `second` started while `first` ran: both succeeded, the second waited for the
    first, one variant ran at any time and the second's (baseline) serves at the end."""
    out_first = first.communicate(timeout=120)
    out_second = second.communicate(timeout=120)
    watch.stop()
    assert first.returncode == 0, out_first[1]
    assert second.returncode == 0, out_second[1]
    assert "waiting for another swap" in out_second[1]
    assert watch.samples > 10 and watch.max_running == 1
    running = running_containers(docker_client, project)
    assert [c.labels["vllm-composer.variant"] for c in running] == ["baseline"]


def holds_the_lock(project: str, pid: int, timeout: float = 60) -> bool:
    """True once the swap lock of `project` names `pid` (its holder writes it once it holds it)."""
    from composer.swap.lock import lock_path

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if lock_path(project).read_text().strip() == str(pid):
                return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def test_no_wait_fails_while_another_swap_runs(sim_stack):
    first = sim_stack.popen("up", "mtp")
    assert holds_the_lock(sim_stack.project, first.pid)  # under load its start-up takes a while
    second = sim_stack.run("up", "baseline", "--no-wait")
    first.communicate(timeout=120)
    assert second.returncode == 1
    assert "another swap of project" in second.stderr


def _settled(stack, client, timeout: float = 30) -> tuple[list, dict]:
    """The running containers and `status`, read while nothing changes them: the killed `up`'s
    own `docker compose` child outlives it for a moment and may still start or stop one."""
    deadline = time.monotonic() + timeout
    while True:
        before = running_containers(client, stack.project)
        status = stack.status()
        after = running_containers(client, stack.project)
        if [c.id for c in before] == [c.id for c in after] or time.monotonic() > deadline:
            return after, status
        time.sleep(0.5)


def test_kill_9_at_random_moments(sim_stack, docker_client):
    rng = random.Random(1234)
    targets = ["baseline", "mtp"]
    assert sim_stack.run("up", "baseline").returncode == 0
    for trial in range(10):
        victim = sim_stack.popen("up", targets[(trial + 1) % 2])
        time.sleep(rng.uniform(0.2, 2.5))
        victim.kill()
        victim.communicate(timeout=30)
        running, status = _settled(sim_stack, docker_client)
        assert len(running) <= 1
        if running:
            assert status["running"] is True
            assert status["variant"] == running[0].labels["vllm-composer.variant"]
        else:
            assert status["running"] is False
        target = targets[trial % 2]
        recovered = sim_stack.run("up", target)
        assert recovered.returncode == 0, f"trial {trial}: {recovered.stderr}"
        after = running_containers(docker_client, sim_stack.project)
        assert [c.labels["vllm-composer.variant"] for c in after] == [target]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_mid_swap_rolls_back(sim_stack, docker_client, signum):
    assert sim_stack.run("up", "baseline").returncode == 0
    swap = sim_stack.popen("up", "mtp-hang", "--timeout", "60")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        running = running_containers(docker_client, sim_stack.project)
        if [c.labels["vllm-composer.variant"] for c in running] == ["mtp-hang"]:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the swap never started mtp-hang")
    swap.send_signal(signum)
    _, stderr = swap.communicate(timeout=60)
    assert swap.returncode == 130  # interrupted, like a shell
    assert "interrupted; rolled back to baseline" in stderr
    running = running_containers(docker_client, sim_stack.project)
    assert [c.labels["vllm-composer.variant"] for c in running] == ["baseline"]
    assert sim_stack.status()["health"] == "ready"
