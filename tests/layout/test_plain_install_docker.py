"""A plain install (the wheel, no extras, in a fresh virtualenv) runs a whole sleep-standby
cycle from another folder: init, render, up, a switch away (the first variant sleeps) and
a wake back, on the simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port, isolated_env, remove_project
from tests.wheel import build_wheel

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def plain_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel installed, without any extra."""
    work = tmp_path_factory.mktemp("plain")
    wheel = build_wheel(work)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    install = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)]
    done = subprocess.run(install, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return venv


def test_a_plain_install_wakes_a_sleeping_variant(
    plain_venv: Path, tmp_path: Path, project_name, docker_client
) -> None:
    python = plain_venv / "bin" / "python"
    # no extra came along: the gateway server's packages are absent from this env
    for server_only in ("starlette", "uvicorn", "aiohttp"):
        probe = subprocess.run([str(python), "-c", f"import {server_only}"], capture_output=True)
        assert probe.returncode != 0, f"{server_only} is installed without the gateway extra"
    env = {k: v for k, v in isolated_env(tmp_path).items() if k != "PYTHONPATH"}
    env["PATH"] = f"{plain_venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def cs(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["compose-spec", *args], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=timeout
        )

    stack_dir = tmp_path / "my-stack"
    done = cs("init", str(stack_dir), "--env")
    assert done.returncode == 0, done.stdout + done.stderr
    sim = REPO / "images" / "sim" / "models"
    with (stack_dir / ".env").open("a", encoding="utf-8") as env_file:
        env_file.write(
            f"VLLM_IMAGE=vllm-sim:latest\nGPU_DEVICES=none\n"
            f"MODEL_DIR={sim / 'Qwen3.8-27B'}\nDRAFT_DIR={sim / 'Qwen3.8-27B-DFlash2'}\n"
        )
    (stack_dir / "sim.toml").write_text(
        f'[stack]\nproject = "{project_name}"\nport = {free_port()}\nstandby = "sleep"\nprobation = "0s"\n'
        '[stack.env]\nSIM_LOAD_SECONDS = "0.3"\nSIM_TIME_SCALE = "20"\n',
        encoding="utf-8",
    )
    stack = ("--env-file", str(stack_dir / ".env"), "--stack", str(stack_dir / "composer.toml"))
    stack += ("--stack", str(stack_dir / "sim.toml"))
    try:
        done = cs(*stack, "render")
        assert done.returncode == 0, done.stdout + done.stderr
        assert (stack_dir / "compose" / "mtp.yml").is_file() and not any(elsewhere.iterdir())
        outcomes = []
        for variant in ("baseline", "mtp", "baseline"):
            done = cs(*stack, "up", variant, "--json")
            assert done.returncode == 0, done.stdout + done.stderr
            outcomes.append(json.loads(done.stdout.strip().splitlines()[-1])["outcome"])
        assert outcomes == ["started", "swapped", "woke"], outcomes
        status = cs(*stack, "status", "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["variant"] == "baseline"
        done = cs(*stack, "down")
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        remove_project(docker_client, project_name)
