"""Fixtures for the real-vLLM tier: the vllm-cpu image and the tiny generated checkpoints.

Both are built when absent (`make test` builds them first through `make image-vllm-cpu`;
the build scripts are no-ops when their inputs are unchanged), so these tests never skip
for lack of an image. Names of everything these tests create start with `hcpu-`; host
ports come from 18200-18299 (`VLLM_CPU_TEST_PORTS=FIRST-LAST` picks another range).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port, remove_project
from tests.vllm_cpu.stack import Stack, make_stack

IMAGE = os.environ.get("VLLM_CPU_IMAGE", "vllm-cpu:0.32.0")
VLLM_VERSION = "0.32.0"
RECIPE = REPO / "images" / "vllm-cpu"
MODELS = REPO / ".composer" / "models-cpu"
_FIRST, _LAST = (int(p) for p in os.environ.get("VLLM_CPU_TEST_PORTS", "18200-18299").split("-"))
PORTS = range(_FIRST, _LAST + 1)


def run(*argv: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a command from the repository root, capturing text output."""
    return subprocess.run(
        [str(a) for a in argv], cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )


def port_in_range() -> int:
    """A port of PORTS free on 127.0.0.1 right now."""
    return free_port((_FIRST, _LAST))


def weights_sha256(directory: Path) -> dict[str, str]:
    """sha256 of every file of a generated model directory."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()
    }


@pytest.fixture(scope="session")
def cpu_image(docker_client) -> str:
    """The vllm-cpu image, built when absent or stale (a no-op when current)."""
    done = run("bash", RECIPE / "build.sh", timeout=3600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return IMAGE


@pytest.fixture(scope="session")
def cpu_models(cpu_image) -> Path:
    """The tiny checkpoints of .env.cpu, generated inside the image when absent."""
    done = run("bash", RECIPE / "models.sh", "--image", cpu_image, MODELS, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return MODELS


@pytest.fixture(scope="session")
def cpu_stack(cpu_models: Path, docker_client, tmp_path_factory) -> Iterator[Stack]:
    """The one stack of the tier (nothing started yet); taken down at the end of the session.

    Tests share it so that a variant one test leaves serving saves the next test a boot.
    """
    made = make_stack(port_in_range(), tmp_path_factory.mktemp("state"))
    try:
        yield made
    finally:
        made.run("down", timeout=300)
        remove_project(docker_client, made.project)
