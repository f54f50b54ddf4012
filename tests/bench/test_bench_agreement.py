"""Determinism and agreement with the baseline output."""

from __future__ import annotations

import pytest

from composer.bench.sweep import agreement, agreement_with, deterministic, pieces


def test_pieces_keep_leading_whitespace() -> None:
    assert pieces("the model\n runs  fast ") == ["the", " model", "\n runs", "  fast"]
    assert "".join(pieces("a b  c")) == "a b  c"


def test_identical_texts_agree_fully() -> None:
    result = agreement("a b c", "a b c")
    assert (result.matched, result.compared, result.first_difference) == (3, 3, None)
    assert result.percent == 100.0


def test_one_flipped_word_in_two_hundred() -> None:
    reference = " ".join(f"w{i}" for i in range(200))
    output = reference.replace("w57", "x57")
    result = agreement(output, reference)
    assert result.percent == pytest.approx(99.5)
    assert result.first_difference == 57


def test_missing_tail_counts_against_agreement() -> None:
    result = agreement("a b", "a b c d")
    assert result.percent == 50.0
    assert result.first_difference == 2


def test_empty_texts() -> None:
    assert agreement("", "").percent == 100.0
    assert agreement("", "a").percent == 0.0


def test_agreement_over_prompts_weighs_by_length() -> None:
    total = agreement_with({0: "a b c d", 1: "x"}, {0: "a b c d", 1: "y"})
    assert total is not None
    assert total.percent == pytest.approx(80.0)
    assert total.first_difference == 0


def test_agreement_with_uses_shared_prompts_only() -> None:
    assert agreement_with({0: "a b"}, {1: "a b"}) is None
    assert agreement_with({0: "a b", 1: "c"}, {0: "a x"}).percent == 50.0


def test_determinism() -> None:
    assert deterministic({0: ["a", "a"], 1: ["b"]}) is True
    assert deterministic({0: ["a", "a "]}) is False
    assert deterministic({0: ["a"], 1: ["b"]}) is None
