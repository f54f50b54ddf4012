"""CPU checks: the speculative methods vLLM's CPU build refuses, on real checkpoint directories
(and, marked docker, on local images that set VLLM_TARGET_DEVICE=cpu or not)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from composer.doctor import cpu_checks as cck
from composer.doctor.report import Host, run_doctor

from .conftest import _tiny_tar
from .fakes import FakeProbe, make_stack

CPU_ENV = """
[variants.baseline.env]
VLLM_TARGET_DEVICE = "cpu"

[variants.dflash2.env]
VLLM_TARGET_DEVICE = "cpu"

[variants.ngram]
extends = "baseline"

[variants.ngram.speculative]
method = "ngram"
num_speculative_tokens = 3
"""
QWEN35_MTP = {
    "architectures": ["Qwen3_5ForCausalLM"],
    "model_type": "qwen3_5_text",
    "mtp_num_hidden_layers": 1,
}
MIMO_MTP = {"architectures": ["MiMoForCausalLM"], "model_type": "qwen2", "num_nextn_predict_layers": 1}
DFLASH2_DRAFT = {
    "architectures": ["DFlash2DraftModel"],
    "model_type": "qwen3",
    "dflash_config": {"block_size": 8},
}
DFLASH1_DRAFT = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "dflash_config": {"block_size": 8},
}


def check(stack, name: str, client=None):
    return cck.check_cpu_method(stack, stack.variant(name), client)


def test_environment_variable_marks_the_cpu_build(tmp_path: Path) -> None:
    stack = make_stack(
        tmp_path, CPU_ENV, environ={"GPU_DEVICES": "none"}, target=QWEN35_MTP, draft=DFLASH2_DRAFT
    )
    dflash = check(stack, "dflash2")
    assert dflash.status == "fail", dflash
    assert "its environment sets VLLM_TARGET_DEVICE=cpu" in dflash.detail
    assert "Model Runner V1 does not support: DFlash candidate-head drafts" in dflash.detail
    mtp = check(stack, "mtp")  # extends baseline: inherits its environment
    assert mtp.status == "fail" and "torchvision" in mtp.detail, mtp
    assert check(stack, "ngram").status == "ok"
    assert check(stack, "baseline") is None  # no speculation: nothing to say


def test_mtp_on_mimo_runs_and_on_other_architectures_is_unverified(tmp_path: Path) -> None:
    mimo = make_stack(tmp_path / "a", CPU_ENV, target=MIMO_MTP)
    found = check(mimo, "mtp")
    assert found.status == "ok" and "MiMoForCausalLM MTP runs there" in found.detail, found
    other = make_stack(tmp_path / "b", CPU_ENV, target={"architectures": ["Qwen3NextForCausalLM"]})
    found = check(other, "mtp")
    assert found.status == "warn" and "Qwen3NextForCausalLM" in found.detail, found


def test_a_dflash1_draft_is_a_warning_a_dspark_variant_fails(tmp_path: Path) -> None:
    stack = make_stack(tmp_path / "a", CPU_ENV, draft=DFLASH1_DRAFT)
    found = check(stack, "dflash2")
    assert found.status == "warn" and "DFlashDraftModel" in found.detail, found
    dspark = CPU_ENV + '\n[variants.dflash2.speculative]\nmethod = "dspark"\n'
    stack = make_stack(tmp_path / "b", dspark)
    found = check(stack, "dflash2")
    assert found.status == "fail" and "dspark speculative decoding" in found.detail, found


def test_no_gpus_alone_is_the_simulator_demo_and_says_nothing(tmp_path: Path) -> None:
    """GPU_DEVICES=none without the CPU build (no variable, no client to read images): silent."""
    stack = make_stack(tmp_path, environ={"GPU_DEVICES": "none"}, draft=DFLASH2_DRAFT)
    for name in stack.variants:
        assert check(stack, name) is None


@pytest.fixture
def env_image(docker_client) -> Iterator:
    """Build local images with given ENV lines (docker import of a tiny tar); removed afterwards."""
    made: list[str] = []

    def build(*env: str) -> str:
        ref = f"vct-doctor-{uuid.uuid4().hex[:10]}:test"
        repo, tag = ref.split(":")
        changes = [f"ENV {line}" for line in env]
        docker_client.api.import_image_from_data(_tiny_tar(), repository=repo, tag=tag, changes=changes)
        made.append(ref)
        return ref

    yield build
    for ref in made:
        docker_client.images.remove(ref, force=True)


@pytest.mark.docker
def test_the_cpu_image_marks_every_variant_of_a_gpu_less_stack(
    tmp_path: Path, docker_client, env_image
) -> None:
    """The stack's vLLM image sets VLLM_TARGET_DEVICE=cpu: its variants run the CPU build, and
    with GPU_DEVICES=none so does a variant whose own image is absent (dflash2's overlay)."""
    cpu, plain = env_image("VLLM_TARGET_DEVICE=cpu"), env_image("PLAIN=1")
    stack = make_stack(
        tmp_path / "a",
        environ={"GPU_DEVICES": "none", "VLLM_IMAGE": cpu, "DFLASH2_IMAGE": "vct-absent:none"},
        target=QWEN35_MTP,
        draft=DFLASH2_DRAFT,
    )
    mtp = check(stack, "mtp", docker_client)
    assert mtp.status == "fail" and f"image {cpu} sets VLLM_TARGET_DEVICE=cpu" in mtp.detail, mtp
    dflash = check(stack, "dflash2", docker_client)
    assert dflash.status == "fail", dflash
    assert f"GPU_DEVICES=none and the stack's image {cpu} sets VLLM_TARGET_DEVICE=cpu" in dflash.detail
    host = Host(
        env_file=None,
        kernel_release="6.1.0",
        probe=FakeProbe(),
        client_factory=lambda: docker.from_env(timeout=30),
        compose_version=lambda: "2.40.3",
    )
    report = run_doctor(stack, None, host)
    speculative = {n for n, v in stack.variants.items() if v.speculative is not None}
    assert {c.variant for c in report.checks if c.name == "cpu-method" and c.status == "fail"} == speculative
    assert {"mtp", "dflash2"} <= speculative

    simulator = make_stack(
        tmp_path / "b",
        environ={"GPU_DEVICES": "none", "VLLM_IMAGE": plain, "DFLASH2_IMAGE": plain},
        draft=DFLASH2_DRAFT,
    )
    for name in simulator.variants:
        assert check(simulator, name, docker_client) is None
