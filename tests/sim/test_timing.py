"""The timing model reproduces the reference measurements (pure, no processes)."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest
from vllm.sim import timing
from vllm.sim.acceptance import AcceptanceSampler
from vllm.sim.profiles import get_profile, load_profile_file

REF = get_profile()
SMALL = get_profile("qwen3.5-2b")

# (method, K) -> (tok/s, tokens per iteration) as measured on the reference machine.
REFERENCE = {
    ("dflash", 1): (34.0, 1.87),
    ("dflash", 3): (49.0, 2.98),
    ("dflash", 4): (50.0, 3.24),
    ("dflash", 7): (58.5, 3.92),
    ("dflash", 10): (55.5, 3.84),
    ("mtp", 7): (59.2, 4.82),
    ("mtp", 12): (52.8, 5.03),
}


def close(actual: float, expected: float, rel: float = 0.03) -> bool:
    return abs(actual - expected) <= rel * expected


@pytest.mark.parametrize(("method", "k"), sorted(REFERENCE))
def test_reference_tok_s_and_tokens_per_iteration(method: str, k: int) -> None:
    tok_s, per_iter = REFERENCE[(method, k)]
    assert close(timing.decode_tok_s(REF, method, k, block_size=8), tok_s)
    assert close(timing.tokens_per_iteration(REF, method, k, block_size=8), per_iter)


def test_baseline_rate() -> None:
    assert timing.decode_tok_s(REF, None, 0) == pytest.approx(29.4)
    assert timing.tokens_per_iteration(REF, None, 0) == 1.0


def test_reference_per_position_acceptance_k7() -> None:
    assert timing.acceptance(REF, "dflash", 7, 8) == pytest.approx((0.77, 0.60, 0.50, 0.42, 0.29, 0.19, 0.15))
    assert timing.acceptance(REF, "mtp", 7) == pytest.approx((0.87, 0.79, 0.69, 0.54, 0.44, 0.28, 0.21))


def test_k7_is_the_peak() -> None:
    dflash = {k: timing.decode_tok_s(REF, "dflash", k, 8) for k in range(1, 13)}
    mtp = {k: timing.decode_tok_s(REF, "mtp", k) for k in range(1, 13)}
    assert max(dflash, key=dflash.__getitem__) == 7
    assert max(mtp, key=mtp.__getitem__) == 7
    assert dflash[7] > dflash[10]
    assert mtp[7] > mtp[12]


def test_speculation_roughly_doubles_decode() -> None:
    assert timing.decode_tok_s(REF, "mtp", 7) / timing.decode_tok_s(REF, None, 0) == pytest.approx(
        2.0, rel=0.03
    )


def test_mtp_iteration_cost_is_linear_in_k() -> None:
    costs = [timing.iteration_seconds(REF, "mtp", k) for k in range(1, 15)]
    steps = {round(b - a, 9) for a, b in pairwise(costs)}
    assert len(steps) == 1 and steps.pop() > 0


def test_dflash_block_mismatch_degrades_acceptance() -> None:
    matched = timing.tokens_per_iteration(REF, "dflash", 7, block_size=8)
    mismatched = timing.tokens_per_iteration(REF, "dflash", 7, block_size=16)
    assert mismatched < matched
    # The block-16 drafter is best near K = 15, not at K = 7.
    assert timing.decode_tok_s(REF, "dflash", 15, 16) > timing.decode_tok_s(REF, "dflash", 7, 16)


@pytest.mark.parametrize(("k", "tok_s", "rate"), [(1, 133.5, 0.60), (3, 120.6, 0.36), (5, 91.1, 0.21)])
def test_small_model_profile(k: int, tok_s: float, rate: float) -> None:
    assert close(timing.decode_tok_s(SMALL, "mtp", k), tok_s)
    assert timing.acceptance_rate(SMALL, "mtp", k) == pytest.approx(rate, abs=0.01)


def test_small_model_k1_best_and_k5_slower_than_baseline() -> None:
    baseline = timing.decode_tok_s(SMALL, None, 0)
    assert baseline == pytest.approx(116.0)
    rates = {k: timing.decode_tok_s(SMALL, "mtp", k) for k in range(1, 8)}
    assert max(rates, key=rates.__getitem__) == 1
    assert rates[5] < baseline


@pytest.mark.parametrize("method", ["dflash", "mtp", "eagle", "ngram"])
@pytest.mark.parametrize("k", [1, 2, 5, 8, 9, 11, 16])
def test_acceptance_is_a_valid_prefix_distribution(method: str, k: int) -> None:
    probs = timing.acceptance(REF, method, k, 8)
    assert len(probs) == k
    assert all(0 <= p < 1 for p in probs)
    assert list(probs) == sorted(probs, reverse=True)


def test_ttft_grows_with_prompt_and_ignores_speculation() -> None:
    assert timing.ttft_seconds(REF, 8000) > timing.ttft_seconds(REF, 2000) > timing.ttft_seconds(REF, 10)


def test_profile_file_extends_a_builtin(tmp_path) -> None:
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps(
            {
                "base": "qwen3.8-27b",
                "name": "faster",
                "baseline_tok_s": 40.0,
                "methods": {
                    "mtp": {
                        "acceptance": {"4": [0.9, 0.8, 0.7, 0.6]},
                        "tok_s": {"4": 80.0},
                        "iteration_ms": {"8": 70.0},
                    }
                },
            }
        )
    )
    profile = load_profile_file(path)
    assert profile.name == "faster"
    assert timing.decode_tok_s(profile, None, 0) == pytest.approx(40.0)
    assert timing.decode_tok_s(profile, "mtp", 4) == pytest.approx(80.0)
    assert timing.decode_tok_s(profile, "dflash", 7, 8) == pytest.approx(58.5)


def test_profile_without_base_needs_rates(tmp_path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"methods": {}}))
    with pytest.raises(ValueError, match="baseline_tok_s"):
        load_profile_file(path)


@pytest.mark.parametrize("draws", [7, 30, 107, 1000])
def test_each_positions_count_stays_within_one_of_its_expectation(draws: int) -> None:
    probs = timing.acceptance(REF, "mtp", 7)
    sampler = AcceptanceSampler(probs)
    accepted = [sampler.next_accepted() for _ in range(draws)]
    for pos, p in enumerate(probs):
        assert abs(sum(a > pos for a in accepted) - draws * p) <= 1
    again = AcceptanceSampler(probs)
    assert [again.next_accepted() for _ in range(draws)] == accepted  # the same for every request
