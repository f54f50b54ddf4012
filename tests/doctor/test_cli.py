"""`compose-spec doctor` through click's CliRunner on this machine (real Docker, no GPU needed)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from composer.cli import main
from tests.conftest import shipped_variants

from .fakes import REPO, free_port

GPU_CHECKS = {"nvidia-runtime", "gpu-count", "compute-capability", "gpu-memory"}


def demo_args(*extra: str) -> list[str]:
    stack, env = str(REPO / "composer.toml"), str(REPO / ".env.demo")
    return ["--stack", stack, "--env-file", env, "--set", f"stack.port={free_port()}", "doctor", *extra]


@pytest.fixture
def demo_env(scratch_image: str) -> dict[str, str]:
    """The demo settings with a generated key and images that exist locally."""
    return {
        "VLLM_API_KEY": "doctor-test-key-Jr4uW3dfZ7SWrbnsSTPM",
        "VLLM_IMAGE": scratch_image,
        "DFLASH2_IMAGE": scratch_image,
    }


@pytest.mark.docker
def test_demo_doctor_exits_0_with_gpu_checks_demo_only(demo_env: dict[str, str]) -> None:
    result = CliRunner().invoke(main, demo_args("--json"), env=demo_env)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["summary"]["fail"] == 0 and data["variant"] is None
    gpu = [c for c in data["checks"] if c["name"] in GPU_CHECKS]
    assert {c["name"] for c in gpu} == GPU_CHECKS
    assert all(c["status"] == "ok" and c["detail"].startswith("no GPU: demo only") for c in gpu)
    assert {c["variant"] for c in data["checks"]} == {None, *shipped_variants()}


@pytest.mark.docker
def test_text_output_and_exit_1_when_a_check_fails(demo_env: dict[str, str]) -> None:
    env = {**demo_env, "VLLM_API_KEY": None}
    result = CliRunner().invoke(main, demo_args("mtp"), env=env)  # type: ignore[arg-type]
    assert result.exit_code == 1
    assert "fail  api-key: VLLM_API_KEY is not set" in result.output
    assert "[dflash2]" not in result.output and "[mtp]" in result.output


def test_unknown_variant_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, demo_args("nosuch"), env={"VLLM_API_KEY": "x" * 20})
    assert result.exit_code == 2
    assert "unknown variant 'nosuch'" in result.output
