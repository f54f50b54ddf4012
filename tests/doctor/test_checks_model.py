"""Checkpoint checks on real directories: model config, MTP depth, DFlash draft and its K."""

from __future__ import annotations

from pathlib import Path

from composer.capacity.model import draft_tensor_parallel_size
from composer.doctor import model_checks as mck
from tests.doctor.fakes import facts

from .fakes import make_stack


def test_model_config_ok_warn_fail(tmp_path: Path) -> None:
    stack = make_stack(tmp_path / "a", target_shards=[1024, 1024])
    found = mck.check_model_config(stack)
    assert found.status == "ok" and "2 safetensors shard(s), 1 MTP layer(s)" in found.detail
    no_weights = make_stack(tmp_path / "b")
    assert mck.check_model_config(no_weights).status == "warn"
    demo = make_stack(tmp_path / "c", environ={"GPU_DEVICES": "none"})
    assert mck.check_model_config(demo).status == "ok"
    missing = make_stack(tmp_path / "d", target=None)
    failed = mck.check_model_config(missing)
    assert failed.status == "fail" and "config.json does not exist" in failed.detail


def test_mtp_layers_ok_for_the_seed_model(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    found = mck.check_mtp(stack, facts(stack, "mtp"))
    assert found.status == "ok" and "K=7" in found.detail
    assert mck.check_mtp(stack, facts(stack, "baseline")) is None


def test_mtp_variant_on_a_model_without_mtp_layers_fails(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, target={"model_type": "llama", "text_config": {}})
    found = mck.check_mtp(stack, facts(stack, "mtp"))
    assert found.status == "fail" and "no MTP head" in found.detail


def test_k_not_divisible_by_mtp_layers_fails_with_multiples(tmp_path: Path) -> None:
    """vLLM refuses such a K at startup, so preflight refuses it before anything stops."""
    stack = make_stack(tmp_path, target={"mtp_num_hidden_layers": 3})
    found = mck.check_mtp(stack, facts(stack, "mtp"))
    assert found.status == "fail" and "n_predict=3" in found.detail
    assert "6 or 9" in found.fix
    divisible = make_stack(
        tmp_path, environ={"NUM_SPECULATIVE_TOKENS": "6"}, target={"mtp_num_hidden_layers": 3}
    )
    assert mck.check_mtp(divisible, facts(divisible, "mtp")).status == "ok"


def test_draft_config_ok_warn_fail(tmp_path: Path) -> None:
    stack = make_stack(tmp_path / "a", draft_shards=[2048])
    assert mck.check_draft_config(stack, facts(stack, "dflash2")).status == "ok"
    assert mck.check_draft_config(stack, facts(stack, "mtp")) is None
    no_weights = make_stack(tmp_path / "b")
    assert mck.check_draft_config(no_weights, facts(no_weights, "dflash2")).status == "warn"
    not_dflash = make_stack(tmp_path / "c", draft={"model_type": "qwen3"})
    failed = mck.check_draft_config(not_dflash, facts(not_dflash, "dflash2"))
    assert failed.status == "fail" and "no dflash_config" in failed.detail
    missing = make_stack(tmp_path / "d", draft=None)
    assert mck.check_draft_config(missing, facts(missing, "dflash2")).status == "fail"


def test_draft_k_against_block_size(tmp_path: Path) -> None:
    stack = make_stack(tmp_path / "a")
    found = mck.check_draft_k(stack, facts(stack, "dflash2"))
    assert found.status == "ok" and "block_size 8" in found.detail
    k10 = make_stack(tmp_path / "b", environ={"NUM_SPECULATIVE_TOKENS": "10"})
    beyond = mck.check_draft_k(k10, facts(k10, "dflash2"))
    assert beyond.status == "fail" and "num_speculative_tokens = 7" in beyond.fix
    k5 = make_stack(tmp_path / "e", environ={"NUM_SPECULATIVE_TOKENS": "5"})
    warn = mck.check_draft_k(k5, facts(k5, "dflash2"))
    assert warn.status == "warn" and "num_speculative_tokens = 7" in warn.fix
    no_block = make_stack(tmp_path / "c", draft={"dflash_config": {}})
    assert mck.check_draft_k(no_block, facts(no_block, "dflash2")).status == "warn"


def test_draft_tensor_parallel_size_defaults_to_stack_tp(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    assert draft_tensor_parallel_size(stack, stack.variant("dflash2")) == 4
    toml = "[variants.dflash2.speculative.extra]\ndraft_tensor_parallel_size = 1\n"
    single = make_stack(tmp_path, toml)
    assert draft_tensor_parallel_size(single, single.variant("dflash2")) == 1
