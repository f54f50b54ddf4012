"""K hints from the checkpoints' config.json."""

from __future__ import annotations

import json
from pathlib import Path

from composer.bench.swaps import variant_hints
from composer.stack.load import load_stack

REPO = Path(__file__).resolve().parents[2]


def stack_with(tmp_path: Path, target: dict | None, draft: dict | None):
    for name, config in (("target", target), ("draft", draft)):
        (tmp_path / name).mkdir()
        if config is not None:
            (tmp_path / name / "config.json").write_text(json.dumps(config))
    env = tmp_path / "empty.env"
    env.write_text("")
    flags = (f"stack.model_dir={tmp_path / 'target'}", f"stack.draft_dir={tmp_path / 'draft'}")
    return load_stack([REPO / "composer.toml"], env, environ={}, flags=flags)


def test_draft_block_size_suggests_k(tmp_path: Path) -> None:
    stack = stack_with(tmp_path, {}, {"dflash_config": {"block_size": 8}})
    hints = variant_hints(stack, stack.variant("dflash2"), [3, 7, 10])
    assert hints.suggested_k == 7
    assert any("block_size 8" in m and "K=7" in m for m in hints.messages)


def test_mtp_layers_in_text_config(tmp_path: Path) -> None:
    stack = stack_with(tmp_path, {"text_config": {"mtp_num_hidden_layers": 2}}, None)
    messages = variant_hints(stack, stack.variant("mtp"), [1, 2, 3, 4, 7]).messages
    assert [m for m in messages if "reject" in m] == [
        "mtp: K=3 exceeds the 2 MTP layer(s) and is not divisible by 2: vLLM will reject it",
        "mtp: K=7 exceeds the 2 MTP layer(s) and is not divisible by 2: vLLM will reject it",
    ]


def test_no_mtp_layers_and_missing_configs(tmp_path: Path) -> None:
    stack = stack_with(tmp_path, {"num_hidden_layers": 64}, None)
    assert "MTP is not available" in variant_hints(stack, stack.variant("mtp"), [7]).messages[0]
    dflash = variant_hints(stack, stack.variant("dflash2"), [7])
    assert dflash.suggested_k is None and "cannot read the draft's config" in dflash.messages[0]
    assert variant_hints(stack, stack.variant("baseline"), []).messages == ()


def test_the_demo_checkpoints() -> None:
    stack = load_stack([REPO / "composer.toml"], REPO / ".env.demo", environ={})
    assert variant_hints(stack, stack.variant("dflash2"), [7]).suggested_k == 7
    assert variant_hints(stack, stack.variant("mtp"), [1, 3, 7, 10]).messages == ()
