"""The simulator image: offline build, container boot, failures inside a container."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import MODELS, SIM_DIR

pytestmark = pytest.mark.docker

TARGET = "/models/Qwen3.8-27B"
FAST = {"SIM_TIME_SCALE": "50", "SIM_LOAD_SECONDS": "0.3"}


@pytest.fixture(scope="module")
def sim_image(sim_docker: Any, unique_module: str) -> Iterator[str]:
    """Build the image with build.sh (network disabled; builds the base once if missing)."""
    tag = f"vllm-sim:pytest-{unique_module}"
    result = subprocess.run(
        [str(SIM_DIR / "build.sh"), "--tag", tag], capture_output=True, text=True, timeout=1800, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--network=none" in (SIM_DIR / "build.sh").read_text()
    yield tag
    sim_docker.images.remove(tag, force=True)


@pytest.fixture(scope="module")
def unique_module() -> str:
    import uuid

    return uuid.uuid4().hex[:8]


def start(
    docker: Any,
    image: str,
    labels: dict[str, str],
    args: list[str],
    env: dict[str, str] | None = None,
    **kwargs: Any,
) -> Any:
    return docker.containers.run(
        image,
        command=args,
        detach=True,
        labels=labels,
        environment={**FAST, **(env or {})},
        volumes={str(MODELS): {"bind": "/models", "mode": "ro"}},
        ports={"8000/tcp": ("127.0.0.1", None)},
        **kwargs,
    )


def host_port(container: Any) -> int:
    container.reload()
    return int(container.ports["8000/tcp"][0]["HostPort"])


def wait_health(container: Any, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        container.reload()
        if container.status == "exited":
            raise AssertionError(container.logs().decode())
        try:
            port = host_port(container)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
                if resp.status == 200:
                    return port
        except (OSError, urllib.error.URLError, IndexError, KeyError, TypeError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"not healthy in {timeout}s:\n{container.logs().decode()}")


def test_image_shape(sim_docker: Any, sim_image: str) -> None:
    config = sim_docker.images.get(sim_image).attrs["Config"]
    assert config["Entrypoint"] == ["vllm", "serve"]
    assert "8000/tcp" in config["ExposedPorts"]
    out = sim_docker.containers.run(
        sim_image,
        entrypoint=["python3", "-c", "import vllm, shutil;print(vllm.__version__, shutil.which('vllm'))"],
        network_mode="none",
        remove=True,
    )
    assert out.decode().split() == ["0.32.0+sim", "/usr/local/bin/vllm"]


def test_container_serves_and_stops_cleanly(
    sim_docker: Any, sim_image: str, sim_labels: dict[str, str], sim_containers: list[Any]
) -> None:
    container = start(
        sim_docker,
        sim_image,
        sim_labels,
        [
            TARGET,
            "--served-model-name",
            "qwen",
            "-tp",
            "4",
            "--max-model-len",
            "131072",
            "--api-key",
            "k",
            "-sc",
            '{"method":"mtp","num_speculative_tokens":7}',
        ],
        ipc_mode="host",
    )
    sim_containers.append(container)
    port = wait_health(container)
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": "Bearer k"}
    )
    with urllib.request.urlopen(request, timeout=5) as resp:
        assert b'"id": "qwen"' in resp.read()
    started = time.monotonic()
    container.stop(timeout=5)
    assert time.monotonic() - started < 3
    assert container.wait(timeout=5)["StatusCode"] == 0
    assert b"Application startup complete." in container.logs()


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        ([], {"SIM_FAIL": "cuda-oom"}, b"torch.OutOfMemoryError: CUDA out of memory"),
        (["-tp", "2"], {}, b"ncclSystemError"),  # Docker's default 64 MiB /dev/shm
    ],
)
def test_failure_exits_non_zero_in_container(
    sim_docker: Any,
    sim_image: str,
    sim_labels: dict[str, str],
    sim_containers: list[Any],
    args: list[str],
    env: dict[str, str],
    needle: bytes,
) -> None:
    container = start(sim_docker, sim_image, sim_labels, [TARGET, *args], env)
    sim_containers.append(container)
    assert container.wait(timeout=30)["StatusCode"] != 0
    logs = container.logs()
    assert needle in logs
    assert b"Engine core initialization failed. See root cause above." in logs
