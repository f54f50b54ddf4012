"""Everyday use on the real daemon with the simulator: the evidence of a failed swap, status,
logs across swaps, crashes after the settle window, restart policy, missing bind paths."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.swap.conftest import running_containers

pytestmark = pytest.mark.docker

NO_KV = '\n[variants.no-cache]\nextends = "mtp"\nenv = { SIM_FAIL = "no-kv-memory" }\n'
LATE = '\n[variants.late]\nextends = "mtp"\nenv = { SIM_FAIL = "crash-after:2" }\n'


def add_variants(stack, text: str) -> None:
    stack.stack_file.write_text(stack.stack_file.read_text() + text)


def interrupt(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    """Ctrl-C a running compose-spec; its exit code and output."""
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    return process.returncode, out, err


def wait_for(predicate, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.2)


def test_failed_swap_keeps_its_log_and_shows_it_before_the_rollback(sim_stack, docker_client):
    add_variants(sim_stack, NO_KV)
    assert sim_stack.run("up", "baseline").returncode == 0
    done = sim_stack.run("up", "no-cache")
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("--- last log lines of no-cache"))
    rollback = lines.index("rolling back to baseline")
    failure = next(i for i, line in enumerate(lines) if "No available memory for the cache blocks" in line)
    assert header < failure < rollback
    assert lines[-1].startswith("compose-spec: error: no-cache failed")
    # The container is gone, its log is not.
    assert [
        c.labels["vllm-composer.variant"] for c in running_containers(docker_client, sim_stack.project)
    ] == ["baseline"]
    saved = sim_stack.run("logs", "--failed", "--tail", "all")
    assert saved.returncode == 0 and "No available memory for the cache blocks" in saved.stdout
    assert "last failed swap: no-cache at " in saved.stderr
    explained = sim_stack.run("logs", "--failed", "--explain")
    assert "no-kv-memory: After loading the weights no GPU memory is left" in explained.stdout
    state = sim_stack.env["XDG_STATE_HOME"]
    text = (Path(state) / "vllm-composer" / sim_stack.project / "last-failure.log").read_text()
    assert sim_stack.api_key not in text and "Application startup complete" not in text
    clean = sim_stack.run("logs", "--explain")
    assert "no known failure signature" in clean.stdout and "logs --failed --explain" in clean.stderr


def test_failed_swap_with_json_prints_one_object(sim_stack):
    add_variants(sim_stack, NO_KV)
    assert sim_stack.run("up", "baseline").returncode == 0
    done = sim_stack.run("up", "no-cache", "--json")
    assert done.returncode == 1
    data = json.loads(done.stdout)
    assert data["kind"] == "swap" and data["exit_code"] == 1 and data["outcome"] == "rolled-back"
    assert data["variant"] == "no-cache" and any("GPU memory" in h for h in data["hints"])


def test_status_shows_the_gate_verdict_and_a_wrong_key(sim_stack):
    assert sim_stack.run("up", "mtp").returncode == 0
    text = sim_stack.run("status").stdout
    assert "health        ready\n" in text and "docker" not in text
    assert sim_stack.status()["docker_health"] == "starting"  # the start period Docker reports
    sim_stack.env["VLLM_API_KEY"] = "sk-not-the-running-key-0123"
    wrong = sim_stack.run("status")
    assert wrong.returncode == 1  # a key mismatch is no healthy status: scripts see it
    assert "401: it serves with the API key it was started with, not this one" in wrong.stdout
    assert "not ready" not in wrong.stdout and "changed" not in wrong.stdout


def test_status_watch_refreshes_and_ctrl_c_ends_quietly(sim_stack):
    assert sim_stack.run("up", "baseline").returncode == 0
    watch = sim_stack.popen("status", "--watch", "--interval", "0.3")
    try:
        assert sim_stack.run("up", "mtp").returncode == 0
        time.sleep(1.5)
    finally:
        code, out, err = interrupt(watch)
    assert code == 130 and "Aborted" not in err and "Traceback" not in err
    variants = [line.split()[1] for line in out.splitlines() if line.startswith("variant ")]
    assert variants[0] == "baseline" and variants[-1] == "mtp"


def test_logs_follow_the_service_across_swaps(sim_stack):
    assert sim_stack.run("up", "baseline").returncode == 0
    follow = sim_stack.popen("logs", "-f", "--tail", "1")
    try:
        time.sleep(1.0)
        assert sim_stack.run("up", "mtp").returncode == 0
        time.sleep(2.0)
    finally:
        code, out, err = interrupt(follow)
    assert code == 130 and "Aborted" not in err and "Traceback" not in err
    assert "--- now following mtp (" in err
    assert "'speculative_config': {'method': 'mtp'" in out  # the new container's boot, from its start
    assert sim_stack.api_key not in out


def test_logs_since_timestamps_and_tail_all(sim_stack):
    assert sim_stack.run("up", "baseline").returncode == 0
    everything = sim_stack.run("logs", "--tail", "all").stdout
    assert "vLLM API server version" in everything
    stamped = sim_stack.run("logs", "-t", "--tail", "3").stdout.splitlines()
    assert len(stamped) == 3 and all(line[:4].isdigit() and line[10] == "T" for line in stamped)
    # the gateway's readiness polls keep adding lines: the later read starts with the earlier one
    assert sim_stack.run("logs", "--since", "1h", "--tail", "all").stdout.startswith(everything)
    assert sim_stack.run("logs", "--since", "2999-01-01T00:00:00").stdout == ""
    bad = sim_stack.run("logs", "--since", "yesterday")
    assert bad.returncode == 2 and "--since 'yesterday'" in bad.stderr


def test_logs_of_the_gateway_and_of_a_named_variant_and_ps(sim_stack):
    assert sim_stack.run("up", "baseline", "--timeout", "10m").returncode == 0
    gateway = sim_stack.run("logs", "gateway", "-n", "5")
    assert gateway.returncode == 0, gateway.stderr
    assert 0 < len(gateway.stdout.splitlines()) <= 5
    assert "vLLM API server version" not in sim_stack.run("logs", "gateway", "-n", "all").stdout
    named = sim_stack.run("logs", "baseline", "-n", "all").stdout
    assert "vLLM API server version" in named
    absent = sim_stack.run("logs", "mtp")
    assert absent.returncode == 1 and "no variant container of variant mtp exists" in absent.stderr
    ps = sim_stack.run("ps", "--json")
    assert ps.returncode == 0, ps.stderr
    rows = {row["variant"]: row for row in json.loads(ps.stdout)}
    assert rows["baseline"]["state"].startswith("serving")
    assert rows["gateway-port"]["ports"].endswith(
        f":{sim_stack.port}->8000/tcp"
    )  # the port holder publishes it
    assert rows["gateway"]["state"].startswith("running")


def test_crash_after_the_settle_window_is_reported_by_status(sim_stack):
    add_variants(sim_stack, LATE)
    done = sim_stack.run("--set", "stack.restart=no", "up", "late", "--settle", "0.2")
    assert done.returncode == 0, done.stderr

    def crashed() -> bool:
        return sim_stack.status()["running"] is False

    wait_for(crashed)
    data = sim_stack.status()["last_exit"]
    assert data["variant"] == "late" and data["state"] == "crashed" and data["exit_code"] == 1
    assert data["finished_at"] and "EngineDeadError" in data["log_tail"]
    text = sim_stack.run("status").stdout
    assert "no variant is running; late crashed: exit code 1 at " in text and "last log lines:" in text


def test_docker_restarts_a_crashed_variant_and_status_says_so(sim_stack, docker_client):
    add_variants(sim_stack, LATE)
    assert sim_stack.run("up", "late", "--settle", "0.2").returncode == 0
    container = running_containers(docker_client, sim_stack.project)[0]
    assert container.attrs["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"

    shown = sim_stack.run("status")

    def restarted_and_running() -> bool:
        """Restarted at least once and up again (it crashes 2 s after each start: between two
        lives `status` says it is crash-looping instead)."""
        nonlocal shown
        shown = sim_stack.run("status")
        pattern = r"restarts +[1-9][0-9]*: Docker restarted it after a crash \(last one at "
        return re.search(pattern, shown.stdout) is not None

    wait_for(restarted_and_running)
    assert shown.returncode == 1  # restarted since the swap that made it serve
    assert re.search(r"late restarted [1-9][0-9]* time\(s\) since the swap that made it serve", shown.stdout)
    data = sim_stack.status(exits=(1,))
    assert data["last_exit"]["finished_at"] and data["restarts_since_swap"] >= 1


def test_a_restart_during_the_gate_fails_the_swap(sim_stack, docker_client):
    assert sim_stack.run("up", "baseline").returncode == 0
    done = sim_stack.run("up", "mtp-crash")  # unless-stopped: Docker restarts it at once
    assert done.returncode == 1
    assert "exited with code 1 and was restarted" in done.stderr and "rolled back to baseline" in done.stderr
    running = running_containers(docker_client, sim_stack.project)
    assert [c.labels["vllm-composer.variant"] for c in running] == ["baseline"]


def test_ls_lists_variants_with_image_presence_and_the_serving_one(sim_stack):
    assert sim_stack.run("up", "mtp").returncode == 0
    done = sim_stack.run("--set", "images.dflash2=vllm-sim:not-built", "ls", "--json")
    rows = {row["variant"]: row for row in json.loads(done.stdout)}
    assert rows["mtp"]["serving"] and not rows["baseline"]["serving"]
    assert rows["mtp"]["method"] == "mtp" and rows["mtp"]["k"] == 7 and rows["mtp"]["image_present"]
    assert rows["dflash2"]["image_present"] is False
    assert sim_stack.run("variants").stdout.splitlines()[-1] == "* serves now: mtp"


def test_compose_by_hand_refuses_a_missing_model_directory(sim_stack, tmp_path, docker_client):
    out = tmp_path / "rendered"
    missing = tmp_path / "no-model-here"
    rendered = sim_stack.run("--set", f"stack.model_dir={missing}", "render", "baseline", "--out", str(out))
    assert rendered.returncode == 0, rendered.stderr
    compose = ["docker", "compose", "-f", str(out / "baseline.yml")]
    try:
        done = subprocess.run(
            [*compose, "up", "-d", "--no-build", "--pull", "never"],
            env=sim_stack.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:  # compose created the port holder before it refused: never left behind
        subprocess.run([*compose, "down"], env=sim_stack.env, capture_output=True, timeout=120)
    assert done.returncode != 0
    assert str(missing) in done.stderr
    assert not missing.exists()
    assert running_containers(docker_client, sim_stack.project) == []
