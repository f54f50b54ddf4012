"""A second Docker engine for context tests: its own dockerd, socket, data root, exec root
and pid file, sharing the host's docker0 bridge (never --bridge=none, which deletes it),
registered as a docker context, loaded with the simulator images; stopped at the end."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from composer.stack.gateway import DEFAULT_IMAGE as GATEWAY_IMAGE
from tests.conftest import in_ci, remove_containers

BASE_IMAGE = "vllm-composer-base:bookworm"
IMAGES = (BASE_IMAGE, "vllm-sim:latest", GATEWAY_IMAGE)
START_WITHIN = 60


@pytest.fixture
def run_script(docker_client) -> Iterator[Callable[..., object]]:
    """Runs `sh -c SCRIPT` detached in the base image, without a network, under a restart
    policy ("no" unless given); the containers are removed at the end of the test."""
    started = []

    def run(script: str, restart: str = "no"):
        container = docker_client.containers.run(
            BASE_IMAGE,
            ["sh", "-c", script],
            detach=True,
            restart_policy={"Name": restart},
            name=f"vct-script-{uuid.uuid4().hex[:8]}",
            network_mode="none",
        )
        started.append(container)
        return container

    yield run
    for container in started:
        container.remove(force=True)


@dataclass
class SecondEngine:
    context: str
    socket: Path
    client: object


def _fail_or_skip(reason: str) -> None:
    if in_ci():
        pytest.fail(f"{reason} (CI=true: Docker tests must not skip)")
    pytest.skip(reason)


def _stop(proc: subprocess.Popen, root: Path) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def second_engine(docker_client) -> Iterator[SecondEngine]:
    import docker

    dockerd = shutil.which("dockerd")
    if dockerd is None:
        _fail_or_skip("dockerd is not installed")
    root = Path(tempfile.mkdtemp(prefix="vct-dockerd-", dir="/tmp"))  # short: socket paths are limited
    sock = root / "docker.sock"
    log = (root / "dockerd.log").open("w")
    proc = subprocess.Popen(
        [
            dockerd,
            "--host", f"unix://{sock}",
            "--data-root", str(root / "data"),
            "--exec-root", str(root / "exec"),
            "--pidfile", str(root / "docker.pid"),
            "--bridge", "docker0",  # the host's bridge, shared; never none
            "--iptables=false",  # leave the first engine's rules alone; ports go through docker-proxy
            "--ip-masq=false",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    context = f"vct-remote-{uuid.uuid4().hex[:8]}"
    client = None
    try:
        deadline = time.monotonic() + START_WITHIN
        while True:
            try:
                client = docker.DockerClient(base_url=f"unix://{sock}", timeout=60)
                client.ping()
                break
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        "the second dockerd did not start:\n" + (root / "dockerd.log").read_text()[-3000:]
                    )
                time.sleep(0.5)
        subprocess.run(
            ["docker", "context", "create", context, "--docker", f"host=unix://{sock}"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        save = subprocess.Popen(["docker", "save", *IMAGES], stdout=subprocess.PIPE)
        load = subprocess.run(
            ["docker", "--context", context, "load"], stdin=save.stdout, capture_output=True, timeout=300
        )
        save.wait(timeout=60)
        assert save.returncode == 0 and load.returncode == 0, load.stderr
        yield SecondEngine(context, sock, client)
    finally:
        if client is not None:
            remove_containers(client)
            client.networks.prune()  # this private engine only: its bridges would outlive it
            client.close()
        subprocess.run(["docker", "context", "rm", "--force", context], capture_output=True, timeout=30)
        _stop(proc, root)
