"""Fixtures for the simulator tests: import path, local processes and the Docker daemon."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import remove_containers

REPO = Path(__file__).resolve().parents[2]
SIM_DIR = REPO / "images" / "sim"
SIM_SRC = SIM_DIR / "src"
DFLASH_DIFF = SIM_DIR / "overlay" / "sim-dflash.diff"
MODELS = SIM_DIR / "models"
TEST_LABEL = "vllm-composer.test"

if str(SIM_SRC) not in sys.path:
    sys.path.insert(0, str(SIM_SRC))


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="session")
def sim_docker() -> Iterator[Any]:
    """A Docker SDK client; fails under CI=true when the daemon is unreachable, else skips."""
    try:
        import docker

        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as err:  # any failure means no usable daemon
        reason = f"Docker is not reachable: {err}"
        if _in_ci():
            pytest.fail(f"{reason} (CI=true: Docker tests must not skip)")
        pytest.skip(reason)
    yield client
    client.close()


@pytest.fixture(scope="session")
def sim_labels() -> dict[str, str]:
    """Labels for every container these tests create (the session label scopes cleanup)."""
    return {TEST_LABEL: "1", f"{TEST_LABEL}.session": uuid.uuid4().hex}


@pytest.fixture
def sim_containers(sim_docker: Any, sim_labels: dict[str, str]) -> Iterator[list[Any]]:
    """Collects containers a test starts; all containers of this session are removed after."""
    started: list[Any] = []
    yield started
    session = f"{TEST_LABEL}.session={sim_labels[f'{TEST_LABEL}.session']}"
    remove_containers(sim_docker, {"label": session})


@pytest.fixture(scope="session")
def dflash_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the simulator source with the dflash overlay diff applied (via `patch`)."""
    if shutil.which("patch") is None:
        pytest.skip("the `patch` tool is not installed")
    root = tmp_path_factory.mktemp("sim-dflash")
    shutil.copytree(SIM_SRC, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["patch", "-p1", "--quiet", "-i", str(DFLASH_DIFF)], cwd=root, check=True)
    return root


@pytest.fixture
def unique() -> str:
    """A short random suffix for names."""
    return uuid.uuid4().hex[:10]
