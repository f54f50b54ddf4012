"""Sleep mode in a container of the simulator image (``SIM_TEST_IMAGE``, default vllm-sim:latest).

``make test`` builds vllm-sim:latest first. ``SIM_TEST_CONTAINER_PREFIX`` names the
container and ``SIM_TEST_HOST_PORT`` fixes its host port (default: any free port).
"""

from __future__ import annotations

import json
import os
import urllib.request
import uuid
from typing import Any

import pytest

from .conftest import MODELS
from .test_image import wait_health

pytestmark = pytest.mark.docker

IMAGE = os.environ.get("SIM_TEST_IMAGE", "vllm-sim:latest")
PREFIX = os.environ.get("SIM_TEST_CONTAINER_PREFIX", "vllm-sim-test")
HOST_PORT = int(os.environ["SIM_TEST_HOST_PORT"]) if os.environ.get("SIM_TEST_HOST_PORT") else None


def call(port: int, method: str, path: str) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method=method, data=b"" if method == "POST" else None
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return resp.status, resp.read()


def sample(port: int, name: str, **labels: str) -> float:
    _, raw = call(port, "GET", "/metrics")
    for line in raw.decode().splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def test_container_sleeps_and_wakes(
    sim_docker: Any, sim_labels: dict[str, str], sim_containers: list[Any]
) -> None:
    if not sim_docker.images.list(name=IMAGE):
        pytest.fail(f"{IMAGE} is not built (make image-sim, or set SIM_TEST_IMAGE)")
    container = sim_docker.containers.run(
        IMAGE,
        command=["/models/Qwen3.8-27B", "--enable-sleep-mode", "--max-model-len", "8192"],
        name=f"{PREFIX}-sleep-{uuid.uuid4().hex[:8]}",
        detach=True,
        labels=sim_labels,
        environment={"SIM_TIME_SCALE": "20", "SIM_LOAD_SECONDS": "0.3", "VLLM_SERVER_DEV_MODE": "1"},
        volumes={str(MODELS): {"bind": "/models", "mode": "ro"}},
        ports={"8000/tcp": ("127.0.0.1", HOST_PORT)},
    )
    sim_containers.append(container)
    port = wait_health(container)
    assert call(port, "POST", "/sleep?level=1")[0] == 200
    assert json.loads(call(port, "GET", "/is_sleeping")[1]) == {"is_sleeping": True}
    assert call(port, "GET", "/health")[0] == 200
    assert sample(port, "sim:gpu_memory_used_bytes", gpu="0") == pytest.approx(1.3 * 2**30, rel=0.001)
    assert sample(port, "vllm:engine_sleep_state", sleep_state="weights_offloaded") == 1.0
    assert call(port, "POST", "/wake_up")[0] == 200
    assert json.loads(call(port, "GET", "/is_sleeping")[1]) == {"is_sleeping": False}
    logs = container.logs().decode()
    assert "seconds to fall asleep." in logs and "seconds to wake up tags" in logs
