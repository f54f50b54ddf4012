"""The `follow` compose profile on the real daemon: `up VARIANT --with follow` starts the
follower in its container (Docker socket, host paths), and a request for an alias is answered
by the aliased variant after the containerised follower switched to it."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from composer import __version__
from tests.conftest import REPO, free_port, in_ci, isolated_env, remove_project

pytestmark = pytest.mark.docker

SOCKET = "/var/run/docker.sock"
IMAGE = os.environ.get("FOLLOW_IMAGE_TAG") or f"vllm-composer-follow:{__version__}"
SIM_MODELS = REPO / "images" / "sim" / "models"
STACK = """[stack]
project = "{project}"
port = {port}
standby = "sleep"
[stack.env]
SIM_LOAD_SECONDS = "0.3"
[images]
vllm = "vllm-sim:latest"
[gateway]
switch_on_model = true
min_residency = 0
hold_timeout = 120
[variants.baseline]
aliases = ["plain"]
[variants.mtp]
extends = "baseline"
aliases = ["fast"]
[variants.mtp.speculative]
method = "mtp"
num_speculative_tokens = 7
"""


class Project:
    """A project folder (composer.toml and .env, the API key only in .env) and compose-spec in it."""

    def __init__(self, folder: Path, state: Path) -> None:
        self.folder = folder
        self.name = f"{os.environ.get('TEST_PROJECT_PREFIX', 'vct')}fp{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.api_key = secrets.token_urlsafe(24)
        folder.mkdir()
        (folder / "composer.toml").write_text(STACK.format(project=self.name, port=self.port), "utf-8")
        (folder / ".env").write_text(
            f"GPU_DEVICES=none\nMODEL_DIR={SIM_MODELS / 'Qwen3.8-27B'}\nVLLM_API_KEY={self.api_key}\n",
            "utf-8",
        )
        self.env = isolated_env(state)
        self.env.pop("VLLM_API_KEY")  # the key lives in the env file only
        self.env["FOLLOW_IMAGE"] = IMAGE

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "composer", *args]
        return subprocess.run(
            argv, capture_output=True, text=True, env=self.env, cwd=self.folder, timeout=timeout
        )


@pytest.fixture
def project(tmp_path, docker_client, sim_images) -> Iterator[Project]:
    from docker.errors import ImageNotFound

    try:
        docker_client.images.get(IMAGE)
    except ImageNotFound:
        missing = f"the follower image {IMAGE} is not built (make image-follow)"
        if in_ci():
            pytest.fail(f"{missing} (CI=true: Docker tests must not skip)")
        pytest.skip(missing)
    made = Project(tmp_path / "project", tmp_path)
    yield made
    remove_project(docker_client, made.name)


@pytest.mark.skipif(not os.path.exists(SOCKET), reason="the engine is not on the local socket")
def test_the_follow_profile_switches_to_an_alias_from_its_container(project, docker_client) -> None:
    done = project.run("up", "baseline", "--with", "follow")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Docker's full power" in done.stdout + done.stderr
    (follower,) = docker_client.containers.list(
        filters={"label": [f"com.docker.compose.project={project.name}", "vllm-composer.role=follow"]}
    )
    attrs = follower.attrs
    assert attrs["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    binds = {m["Source"]: m["Destination"] for m in attrs["Mounts"]}
    assert binds[SOCKET] == SOCKET
    assert binds[str(project.folder.resolve())] == str(project.folder.resolve())
    assert attrs["Config"]["WorkingDir"] == str(project.folder.resolve())
    assert project.api_key not in json.dumps(attrs["Config"])  # the key only through the env file
    run_files = list((Path(project.env["XDG_STATE_HOME"]) / "vllm-composer" / project.name).glob("*.yml"))
    assert run_files and all(project.api_key not in f.read_text("utf-8") for f in run_files)

    reply = httpx.post(
        f"http://127.0.0.1:{project.port}/v1/completions",
        json={"model": "fast", "prompt": "Say hello", "max_tokens": 4, "temperature": 0},
        headers={"Authorization": f"Bearer {project.api_key}"},
        timeout=180,
    )
    assert reply.status_code == 200, reply.text
    logs = follower.logs().decode()
    assert "switched mtp" in logs, logs
    serving = docker_client.containers.list(
        filters={"label": [f"com.docker.compose.project={project.name}", "vllm-composer.variant"]}
    )
    states = {c.labels["vllm-composer.variant"]: c for c in serving}
    assert states["mtp"].status == "running"
    status = project.run("status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["variant"] == "mtp"
