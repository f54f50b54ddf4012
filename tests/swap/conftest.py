"""Fixtures for swap tests: an isolated stack (own project, port, state dir) on the simulator."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, StackCli, free_port, isolated_env, remove_project

FAILURE_VARIANTS = """
[variants.mtp-crash]
extends = "mtp"
env = { SIM_FAIL = "crash" }

[variants.mtp-hang]
extends = "mtp"
env = { SIM_FAIL = "hang" }

[variants.mtp-late-crash]
extends = "mtp"
env = { SIM_FAIL = "crash-after:0.3" }

[variants.wrong-name]
extends = "baseline"
extra_args = ["--served-model-name", "someone-else"]
"""


@dataclass
class Stack(StackCli):
    """A test stack and a way to run compose-spec against it."""

    project: str
    port: int
    api_key: str
    env: dict[str, str]
    stack_file: Path

    def run_dir(self) -> Path:
        """Where `up` keeps this project's run files."""
        return Path(self.env["XDG_STATE_HOME"]) / "vllm-composer" / self.project

    def status_until(self, ready: Callable[[dict], object], timeout: float) -> dict:
        """`status --json`, asked every 0.5 s until `ready` holds for it or `timeout` s pass: the last one."""
        deadline, status = time.monotonic() + timeout, {}
        while time.monotonic() < deadline:
            status = self.status()
            if ready(status):
                break
            time.sleep(0.5)
        return status

    def status(self, exits: tuple[int, ...] = (0,)) -> dict:
        done = self.run("status", "--json")
        assert done.returncode in exits, done.stderr
        return json.loads(done.stdout)


def running_containers(client, project: str) -> list:
    """Running variant containers of a compose project."""
    return client.containers.list(
        filters={"label": [f"com.docker.compose.project={project}", "vllm-composer.variant"]},
        ignore_removed=True,  # one removed while listed is not running
    )


@pytest.fixture(scope="session")
def sim_images(docker_client) -> None:
    """The simulator images must exist (make test builds them before pytest)."""
    from docker.errors import ImageNotFound

    for tag in ("vllm-sim:latest", "vllm-sim:dflash2"):
        try:
            docker_client.images.get(tag)
        except ImageNotFound:
            if tag.endswith("dflash2"):
                done = subprocess.run(
                    [sys.executable, "-m", "composer", "--env-file", ".env.demo", "build", "dflash2"],
                    cwd=REPO,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                assert done.returncode == 0, done.stderr
            else:
                pytest.fail(f"{tag} is missing: run `make image-sim` first")


@pytest.fixture
def sim_stack(tmp_path, project_name, docker_client, sim_images) -> Iterator[Stack]:
    """An isolated stack on the simulator with fast loads and failure variants."""
    port = free_port()
    stack_file = tmp_path / "test-stack.toml"
    stack_file.write_text(
        f'[stack]\nproject = "{project_name}"\nport = {port}\nprobation = "0s"\n'
        '[stack.env]\nSIM_LOAD_SECONDS = "0.3"\nSIM_TIME_SCALE = "20"\n' + FAILURE_VARIANTS,
        encoding="utf-8",
    )
    env = isolated_env(tmp_path)
    api_key = env["VLLM_API_KEY"]
    stack = Stack(project_name, port, api_key, env, stack_file)
    yield stack
    remove_project(docker_client, project_name)


FAST_STACK = """
[stack]
project = "{project}"
port = {port}
probation = "0s"
[stack.env]
SIM_LOAD_SECONDS = "0.3"
SIM_TIME_SCALE = "20"
"""
"""A `module_stack` template: fast loads, no probation."""

SERVING_STACK = (
    FAST_STACK
    + """[gateway]
switch_on_model = true
min_residency = 0
residency_wait = 120
hold_timeout = 120
[variants.mtp-hang]
extends = "mtp"
aliases = ["hang"]
env = {{ SIM_FAIL = "hang" }}
"""
)


@pytest.fixture(scope="module")
def serving_stack(tmp_path_factory, docker_client, sim_images) -> Iterator[Stack]:
    """One stack for a whole test module, baseline serving when it starts: the gateway raises
    switch demands (aliases, no residency), and `mtp-hang` (alias `hang`) never gets ready."""
    made = module_stack(tmp_path_factory.mktemp("serving"), SERVING_STACK, "vctsrv")
    try:
        done = made.run("up", "baseline", timeout=180)
        assert done.returncode == 0, done.stderr
        yield made
    finally:
        remove_project(docker_client, made.project)


def module_stack(folder: Path, template: str, prefix: str) -> Stack:
    """A stack of its own project (`prefix` and a random suffix) and free port in `folder`, from
    `template` (a stack file with `{project}` and `{port}`)."""
    project = f"{prefix}{uuid.uuid4().hex[:10]}"
    port = free_port()
    stack_file = folder / "stack.toml"
    stack_file.write_text(template.format(project=project, port=port), encoding="utf-8")
    env = isolated_env(folder)
    return Stack(project, port, env["VLLM_API_KEY"], env, stack_file)
