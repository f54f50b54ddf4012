"""The follower image: built offline from the local base, skipped when current, and able to
drive the host's Docker through a mounted socket (real daemon)."""

from __future__ import annotations

import os
import subprocess

import pytest

from composer import __version__
from tests.conftest import REPO

pytestmark = pytest.mark.docker

TAG = os.environ.get("FOLLOW_IMAGE_TAG") or f"vllm-composer-follow:{__version__}"
SOCKET = "/var/run/docker.sock"


def _build() -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FOLLOW_IMAGE_TAG": TAG, "PIP": str(REPO / ".venv" / "bin" / "pip")}
    return subprocess.run(
        ["bash", "images/follow/build.sh", "--no-base-build"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    argv = ["docker", "run", "--rm", "--network", "none", "-v", f"{SOCKET}:{SOCKET}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not os.path.exists(SOCKET), reason="the engine is not on the local socket")
def test_the_follower_image_builds_once_and_drives_docker() -> None:
    first = _build()
    assert first.returncode == 0, first.stderr
    again = _build()
    assert again.returncode == 0 and "is current" in again.stdout, again.stdout + again.stderr
    assert _run(TAG, "--version").stdout.strip() == f"compose-spec, version {__version__}"
    compose = _run("--entrypoint", "docker", TAG, "compose", "version")
    assert compose.returncode == 0 and "Docker Compose version v2" in compose.stdout, compose.stderr
    # through the socket it sees this engine's containers (its own included)
    seen = _run("--entrypoint", "docker", TAG, "info", "--format", "{{.ID}}")
    here = subprocess.run(["docker", "info", "--format", "{{.ID}}"], capture_output=True, text=True)
    assert seen.returncode == 0 and seen.stdout.strip() == here.stdout.strip(), seen.stderr
