"""Fixtures for the real-vLLM tier: the vllm-cpu image and the tiny generated checkpoints.

Both are built when absent (`make test` builds them first through `make image-vllm-cpu`;
the build scripts are no-ops when their inputs are unchanged), so these tests never skip
for lack of an image. Names of everything these tests create start with `hcpu-`.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

IMAGE = os.environ.get("VLLM_CPU_IMAGE", "vllm-cpu:0.32.0")
VLLM_VERSION = "0.32.0"
RECIPE = REPO / "images" / "vllm-cpu"
MODELS = REPO / ".composer" / "models-cpu"
PORTS = range(18200, 18300)


def run(*argv: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a command from the repository root, capturing text output."""
    return subprocess.run(
        [str(a) for a in argv], cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )


def port_in_range() -> int:
    """A port of 18200-18299 free on 127.0.0.1 right now."""
    for port in PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 18200-18299")


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
