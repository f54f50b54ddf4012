"""doctor's adaptive-speculation check: the published costs, and a hybrid model's notes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from composer.doctor.model_checks import check_adaptive, is_hybrid
from composer.stack.load import load_stack
from tests.conftest import REPO
from tests.doctor.fakes import facts

HYBRID = {
    "text_config": {"full_attention_interval": 4, "linear_num_value_heads": 48, "mtp_num_hidden_layers": 1}
}
DENSE = {"text_config": {"num_hidden_layers": 64, "mtp_num_hidden_layers": 1}}


def _stack(tmp_path: Path, config: dict):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    flags = (f"stack.model_dir={model}",)
    return load_stack([REPO / "composer.toml"], env_file=None, environ={}, flags=flags)


def test_dense_model_variants_list_their_published_costs(tmp_path: Path) -> None:
    stack = _stack(tmp_path, DENSE)
    dsd = check_adaptive(stack, facts(stack, "mtp-dsd"))
    assert dsd is not None and dsd.status == "ok"
    assert "vllm#49548" in dsd.detail and "+6.6%" in dsd.detail and "+21.6%" in dsd.detail
    adaptive = check_adaptive(stack, facts(stack, "dflash2-adaptive"))
    assert adaptive is not None and "+15% to +22%" in adaptive.detail and "4-8%" in adaptive.detail
    assert check_adaptive(stack, facts(stack, "mtp")) is None
    assert check_adaptive(stack, facts(stack, "baseline")) is None


@pytest.mark.parametrize("variant", ["mtp", "mtp-dsd"])
def test_hybrid_model_mtp_gets_the_memory_note(tmp_path: Path, variant: str) -> None:
    stack = _stack(tmp_path, HYBRID)
    found = check_adaptive(stack, facts(stack, variant))
    assert found is not None and found.status == "warn"
    assert "vllm#55533" in found.detail and "about 3 sequences" in found.detail


def test_hybrid_model_adaptive_verification_is_expected_to_be_refused(tmp_path: Path) -> None:
    stack = _stack(tmp_path, HYBRID)
    found = check_adaptive(stack, facts(stack, "mtp-adaptive"))
    assert found is not None and found.status == "warn" and "GDNAttentionBackend" in found.detail


def test_hybrid_detection() -> None:
    assert is_hybrid(HYBRID) and not is_hybrid(DENSE)
    assert is_hybrid({"layer_types": ["linear_attention", "full_attention"]})
    assert is_hybrid(json.loads((REPO / "images/sim/models/Qwen3.8-27B/config.json").read_text()))
