"""`make demo`'s setup and key, without Docker: the setup prints one line per step and keeps
its output in a log (shown on failure); the demo writes a generated key into its env file
(mode 0600), or into a private copy beside a file git tracks."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

KEY_LINE = "VLLM_API_KEY="


@pytest.fixture
def fake_compose_spec(tmp_path: Path) -> Path:
    """A compose-spec that fails at once: the demo stops after its key step."""
    fake = tmp_path / "compose-spec"
    fake.write_text("#!/bin/sh\necho 'fake compose-spec: no engine' >&2\nexit 1\n")
    fake.chmod(0o755)
    return fake


def _demo(script: Path, compose_spec: Path, env_file: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(compose_spec.parent), **env}
    return subprocess.run(
        ["bash", str(script), str(compose_spec), env_file],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
    )


def _keys(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith(KEY_LINE)]


def test_the_demo_writes_a_new_key_into_its_env_file_privately(
    tmp_path: Path, fake_compose_spec: Path
) -> None:
    env_file = tmp_path / "mine.env"
    env_file.write_text((REPO / ".env.demo").read_text())
    env_file.chmod(0o644)
    done = _demo(REPO / "images" / "sim" / "demo.sh", fake_compose_spec, str(env_file))
    assert done.returncode == 1 and "fake compose-spec" in done.stderr  # it got as far as `up`
    assert f"wrote a new VLLM_API_KEY into {env_file} (mode 0600)" in done.stdout
    (key,) = _keys(env_file)
    assert len(key) > len(KEY_LINE) + 40 and key[len(KEY_LINE) :] not in done.stdout + done.stderr
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert env_file.read_text().startswith((REPO / ".env.demo").read_text())  # the rest is kept
    again = _demo(REPO / "images" / "sim" / "demo.sh", fake_compose_spec, str(env_file))
    assert "wrote" not in again.stdout and _keys(env_file) == [key]  # a key there is kept
    from_env = tmp_path / "other.env"
    from_env.write_text("GPU_DEVICES=none\n")
    _demo(
        REPO / "images" / "sim" / "demo.sh", fake_compose_spec, str(from_env), VLLM_API_KEY="sk-" + "x" * 40
    )
    assert _keys(from_env) == []  # the environment's key is used, nothing written


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_tracked_env_file_gets_a_private_copy_that_keeps_its_key(
    tmp_path: Path, fake_compose_spec: Path
) -> None:
    repo = tmp_path / "checkout"
    (repo / "images" / "sim").mkdir(parents=True)
    script = repo / "images" / "sim" / "demo.sh"
    shutil.copy(REPO / "images" / "sim" / "demo.sh", script)
    (repo / ".env.demo").write_text("GPU_DEVICES=none\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", ".env.demo"], check=True)
    done = _demo(script, fake_compose_spec, ".env.demo")
    assert "its private copy .env.demo.local holds the key" in done.stdout
    assert (repo / ".env.demo").read_text() == "GPU_DEVICES=none\n"  # the tracked file is untouched
    local = repo / ".env.demo.local"
    (key,) = _keys(local)
    assert stat.S_IMODE(local.stat().st_mode) == 0o600 and local.read_text().startswith("GPU_DEVICES=none\n")
    (repo / ".env.demo").write_text("GPU_DEVICES=none\nVLLM_PORT=8100\n")
    _demo(script, fake_compose_spec, ".env.demo")
    assert "VLLM_PORT=8100" in local.read_text() and _keys(local) == [key]  # remade, same key


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_a_failed_setup_step_shows_its_log_tail_and_path(tmp_path: Path) -> None:
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "demo", "DEMO_SETUP=no-such-step"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    log = ".composer/logs/no-such-step.log"
    assert done.returncode != 0
    assert f"demo: make no-such-step (log: {log}) ... failed" in done.stdout
    assert "No rule to make target 'no-such-step'" in done.stdout  # the log's tail
    assert f"the full log is {log}" in done.stdout and "==>" not in done.stdout  # the demo never began
