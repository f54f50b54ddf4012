"""The tiny checkpoint generator: deterministic, idempotent, and a draft that fits its target."""

from __future__ import annotations

import json

import pytest

from tests.vllm_cpu.conftest import RECIPE, run, weights_sha256

pytestmark = [pytest.mark.docker, pytest.mark.vllm_cpu]


def generate(image: str, outdir, *options: str) -> str:
    done = run("bash", RECIPE / "models.sh", "--image", image, outdir, "--", *options, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_same_seed_same_bytes_other_seed_other_weights(cpu_image, tmp_path):
    first, second, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    generate(cpu_image, first, "--only", "qwen3-tiny", "--only", "qwen3-tiny-draft")
    generate(cpu_image, second, "--only", "qwen3-tiny", "--only", "qwen3-tiny-draft")
    generate(cpu_image, other, "--seed", "7", "--only", "qwen3-tiny")
    for name in ("qwen3-tiny", "qwen3-tiny-draft"):
        assert weights_sha256(first / name) == weights_sha256(second / name)
    ours, theirs = weights_sha256(first / "qwen3-tiny"), weights_sha256(other / "qwen3-tiny")
    assert ours["model.safetensors"] != theirs["model.safetensors"]
    assert ours["config.json"] == theirs["config.json"]


def test_second_run_leaves_current_models_alone(cpu_image, tmp_path):
    assert "qwen3-tiny: written" in generate(cpu_image, tmp_path, "--only", "qwen3-tiny")
    stamp = (tmp_path / "qwen3-tiny" / "model.safetensors").stat().st_mtime_ns
    assert "qwen3-tiny: up to date" in generate(cpu_image, tmp_path, "--only", "qwen3-tiny")
    assert (tmp_path / "qwen3-tiny" / "model.safetensors").stat().st_mtime_ns == stamp
    # A damaged file is noticed and the model written again.
    (tmp_path / "qwen3-tiny" / "config.json").write_text("{}")
    assert "qwen3-tiny: written" in generate(cpu_image, tmp_path, "--only", "qwen3-tiny")


def test_checkpoints_have_the_documented_shape(cpu_models):
    target = json.loads((cpu_models / "qwen3-tiny" / "config.json").read_text())
    draft = json.loads((cpu_models / "qwen3-tiny-draft" / "config.json").read_text())
    hd16 = json.loads((cpu_models / "qwen3-tiny-hd16" / "config.json").read_text())
    assert (target["num_hidden_layers"], target["hidden_size"], target["head_dim"]) == (2, 256, 64)
    assert target["vocab_size"] == draft["vocab_size"] == 512
    assert draft["num_hidden_layers"] == 1 and hd16["head_dim"] == 16
    tokenizers = {
        (cpu_models / name / "tokenizer.json").read_bytes() for name in ("qwen3-tiny", "qwen3-tiny-draft")
    }
    assert len(tokenizers) == 1
    assert len(json.loads(tokenizers.pop())["model"]["vocab"]) == 512


def test_unknown_model_name_is_refused(cpu_image, tmp_path):
    done = run("bash", RECIPE / "models.sh", "--image", cpu_image, tmp_path, "--", "--only", "nope")
    assert done.returncode == 2
    assert "unknown model 'nope'" in done.stderr and "qwen3-tiny" in done.stderr


def safetensors_names(path) -> set[str]:
    """Tensor names from a safetensors file's JSON header."""
    with open(path, "rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        return set(json.loads(handle.read(size))) - {"__metadata__"}


def test_mimo_mtp_checkpoint_is_what_vllms_mimo_mtp_loader_reads(cpu_image, tmp_path):
    """MiMo: Qwen2 layers under `MiMoForCausalLM` and `model.mtp_layers.0.*` (served on CPU by
    vLLM's `mtp` method, images/vllm-cpu/captures/mtp.txt)."""
    generate(cpu_image, tmp_path, "--mtp", "--only", "mimo-tiny-mtp")
    config = json.loads((tmp_path / "mimo-tiny-mtp" / "config.json").read_text())
    assert config["architectures"] == ["MiMoForCausalLM"] and config["model_type"] == "qwen2"
    assert config["num_nextn_predict_layers"] == 1 and config["num_hidden_layers"] == 2
    names = safetensors_names(tmp_path / "mimo-tiny-mtp" / "model.safetensors")
    mtp = {n for n in names if n.startswith("model.mtp_layers.0.")}
    for part in (
        "input_proj.weight",
        "token_layernorm.weight",
        "hidden_layernorm.weight",
        "final_layernorm.weight",
    ):
        assert f"model.mtp_layers.0.{part}" in mtp
    assert (
        "model.mtp_layers.0.self_attn.q_proj.bias" in mtp and "model.mtp_layers.0.mlp.down_proj.weight" in mtp
    )
    assert "model.layers.1.self_attn.q_proj.weight" in names and "lm_head.weight" in names
