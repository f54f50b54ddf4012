"""The one place that builds the Docker SDK client and runs the `docker compose` CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from composer.errors import ComposerError, DockerUnavailable

if TYPE_CHECKING:
    import docker


def docker_client(timeout: int = 120) -> docker.DockerClient:
    """A client for the engine at DOCKER_HOST (or the default socket), checked with a ping."""
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as err:
        host = os.environ.get("DOCKER_HOST", "the default socket")
        raise DockerUnavailable(
            f"cannot reach the Docker engine at {host}: {err}; start dockerd (make docker)"
        ) from err
    return client


def docker_binary() -> str:
    """Path of the docker CLI, or DockerUnavailable."""
    found = shutil.which("docker")
    if not found:
        raise DockerUnavailable("the docker CLI is not on PATH: install it (make docker)")
    return found


def compose_version() -> str:
    """The Compose v2 plugin's version, or DockerUnavailable."""
    try:
        done = subprocess.run(
            [docker_binary(), "compose", "version", "--short"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise DockerUnavailable("`docker compose version` did not answer within 30 s") from err
    if done.returncode != 0:
        raise DockerUnavailable(
            "the Compose v2 plugin is missing (`docker compose` failed): install it (make docker)"
        )
    return done.stdout.strip()


def compose(
    project: str,
    compose_file: Path | None,
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run `docker compose -p PROJECT [-f FILE] ARGS...`; raise ComposerError on failure."""
    files = ["--file", str(compose_file)] if compose_file is not None else []
    argv = [docker_binary(), "compose", "--project-name", project, *files, *args]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as err:
        command = " ".join(args)
        raise ComposerError(f"`docker compose {command}` did not finish within {timeout:.0f} s") from err
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        last = message[-1] if message else f"exit code {done.returncode}"
        raise ComposerError(f"`docker compose {' '.join(args)}` failed: {last}")
    return done
