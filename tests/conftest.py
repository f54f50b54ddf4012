"""Shared fixtures: the Docker daemon (never silently skipped in CI) and test isolation."""

from __future__ import annotations

import os
import random
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TEST_LABEL = "vllm-composer.test"
# The command line of this environment, never whatever `compose-spec` is on PATH.
COMPOSE_SPEC = (sys.executable, "-m", "composer")


def in_ci() -> bool:
    """True when running under CI (CI=true): Docker tests must run, not skip."""
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _docker_or_reason():
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
        return client, ""
    except Exception as err:  # any failure means "no usable daemon"
        return None, f"Docker is not reachable: {err}"


@pytest.fixture(scope="session")
def docker_client():
    """A Docker SDK client; fails under CI=true when the daemon is missing, else skips."""
    client, reason = _docker_or_reason()
    if client is None:
        if in_ci():
            pytest.fail(f"{reason} (CI=true: Docker tests must not skip)")
        pytest.skip(reason)
    yield client
    client.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test marked `docker` gets the docker_client fixture, so it cannot skip in CI."""
    for item in items:
        if item.get_closest_marker("docker") and "docker_client" not in getattr(item, "fixturenames", []):
            item.fixturenames.append("docker_client")  # type: ignore[attr-defined]


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (inside TEST_PORT_RANGE=LOW-HIGH if set)."""
    low, _, high = os.environ.get("TEST_PORT_RANGE", "").partition("-")
    if low and high:
        for port in random.sample(range(int(low), int(high) + 1), int(high) - int(low) + 1):
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
        raise RuntimeError(f"no free port in TEST_PORT_RANGE={low}-{high}")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def project_name() -> Iterator[str]:
    """A unique compose project name for one test."""
    yield f"{os.environ.get('TEST_PROJECT_PREFIX', 'vct')}{uuid.uuid4().hex[:10]}"
