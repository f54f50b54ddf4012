"""End to end on the simulator: the demo recipe turns vllm-sim:latest into an image that
serves `method: dflash`, while the base image rejects it like vLLM's pydantic config."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from composer.overlay.builder import build_overlay
from composer.overlay.recipe import load_recipe
from composer.stack.load import load_stack

from .conftest import TEST_LABELS, require_image

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "images" / "sim" / "models"
SIM = "vllm-sim:latest"
SPEC = {
    "method": "dflash",
    "model": "/models/Qwen3.8-27B-DFlash2",
    "num_speculative_tokens": 7,
    "attention_backend": "flash_attn",
}
SERVE = ["/models/Qwen3.8-27B", "--served-model-name", "m", "--speculative-config", json.dumps(SPEC)]
PROBE = (
    "import urllib.request as u; "
    "print(u.urlopen('http://127.0.0.1:8000/health').status, "
    "u.urlopen('http://127.0.0.1:8000/v1/models').read().decode())"
)
pytestmark = pytest.mark.docker


@pytest.fixture
def overlay(docker_client) -> Iterator[str]:
    """The demo's dflash2 overlay of vllm-sim:latest under a unique test tag."""
    require_image(docker_client, SIM, "run `make image-sim`")
    tag = f"vct-sim-dflash2-{uuid.uuid4().hex[:8]}:1"
    stack = load_stack([REPO / "composer.toml"], REPO / ".env.demo", environ={"DFLASH2_IMAGE": tag})
    recipe = load_recipe(REPO / "images", "dflash2", stack.images)
    assert recipe.base == SIM and recipe.diffs[0].name.endswith("sim-dflash.diff")
    result = build_overlay(docker_client, recipe, extra_labels=TEST_LABELS)
    assert result.status == "built"
    assert "vllm/v1/spec_decode/dflash.py" in result.files
    yield tag
    docker_client.images.remove(tag, force=True)


def serve(client, image: str):
    """`vllm serve` with a dflash speculative config, offline, models mounted read-only."""
    return client.containers.run(
        image,
        SERVE,
        detach=True,
        network_mode="none",
        environment={"SIM_LOAD_SECONDS": "0"},
        volumes={str(MODELS): {"bind": "/models", "mode": "ro"}},
        labels=TEST_LABELS,
    )


def test_overlay_serves_dflash_and_base_rejects_it(docker_client, overlay) -> None:
    base = serve(docker_client, SIM)
    try:
        status = base.wait(timeout=60)
        logs = base.logs().decode()
        assert status["StatusCode"] != 0
        assert "1 validation error for SpeculativeConfig" in logs
        assert "input_value='dflash'" in logs
    finally:
        base.remove(force=True)

    served = serve(docker_client, overlay)
    try:
        deadline = time.monotonic() + 60
        while "Application startup complete." not in served.logs().decode():
            served.reload()
            assert served.status == "running", served.logs().decode()[-2000:]
            assert time.monotonic() < deadline, "the overlay image did not become ready"
            time.sleep(0.2)
        code, output = served.exec_run(["python3", "-c", PROBE])
        assert code == 0, output.decode()
        health, models = output.decode().split(" ", 1)
        assert health == "200"
        assert json.loads(models)["data"][0]["id"] == "m"
    finally:
        served.remove(force=True)
