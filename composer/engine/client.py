"""The one place that builds the Docker SDK client and runs the `docker compose` CLI."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
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


def run_detached(
    argv: Sequence[str], env: Mapping[str, str] | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run a command in a session of its own; kill its whole process group on a timeout.

    The terminal's Ctrl-C goes to the foreground process group: a child in its own
    session never receives it, so a rollback's `docker compose` finishes even when the
    user presses Ctrl-C again. The child, and anything it started, is killed when the
    timeout passes or when this process stops waiting for it (an exception, Ctrl-C).
    """
    with subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env) if env is not None else None,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException:
            _kill_group(process)
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _kill_group(process: subprocess.Popen[str]) -> None:
    """SIGKILL the child's process group (its session leader's pid) and reap the child."""
    with contextlib.suppress(ProcessLookupError):  # the group is gone already
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate()


def compose(
    project: str,
    compose_file: Path | None,
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run `docker compose -p PROJECT [-f FILE] ARGS...`; raise ComposerError on failure.

    It runs in its own session (see run_detached): signals sent to our process group
    do not reach it, and it is killed with its children when `timeout` passes.
    """
    files = ["--file", str(compose_file)] if compose_file is not None else []
    argv = [docker_binary(), "compose", "--project-name", project, *files, *args]
    try:
        done = run_detached(argv, env, timeout)
    except subprocess.TimeoutExpired as err:
        command = " ".join(args)
        raise ComposerError(f"`docker compose {command}` did not finish within {timeout:.0f} s") from err
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        last = message[-1] if message else f"exit code {done.returncode}"
        raise ComposerError(f"`docker compose {' '.join(args)}` failed: {last}")
    return done
