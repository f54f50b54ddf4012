"""Prometheus parsing, counter deltas and the acceptance derived from them."""

from __future__ import annotations

import pytest

from composer.bench.client import (
    ACCEPTED_PER_POS,
    DRAFTS,
    SpecCounters,
    acceptance,
    parse_prometheus,
    total,
)
from composer.errors import BenchError

LABELS = 'engine="0",model_name="m"'


def exposition(drafts: float, draft_tokens: float, accepted: float, per_pos: list[float], gen: float) -> str:
    lines = [
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f"vllm:spec_decode_num_drafts_total{{{LABELS}}} {drafts}",
        f"vllm:spec_decode_num_draft_tokens_total{{{LABELS}}} {draft_tokens}",
        f"vllm:spec_decode_num_accepted_tokens_total{{{LABELS}}} {accepted}",
        f"vllm:generation_tokens_total{{{LABELS}}} {gen}",
        f'vllm:time_to_first_token_seconds_bucket{{{LABELS},le="+Inf"}} 3.0',
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="{i}"}} {v}'
        for i, v in enumerate(per_pos)
    ]
    return "\n".join(lines) + "\n"


def test_parse_skips_comments_and_keeps_labels() -> None:
    samples = parse_prometheus(exposition(10, 30, 20, [9, 7, 4], 100))
    assert total(samples, DRAFTS) == 10
    assert total(samples, ACCEPTED_PER_POS, position="1") == 7
    assert total(samples, "vllm:time_to_first_token_seconds_bucket", le="+Inf") == 3
    assert not any(name.startswith("#") for name, _ in samples)


def test_total_sums_over_engines() -> None:
    text = 'vllm:generation_tokens_total{engine="0"} 5\nvllm:generation_tokens_total{engine="1"} 7\n'
    assert total(parse_prometheus(text), "vllm:generation_tokens_total") == 12


def test_label_values_with_escaped_quotes_and_commas() -> None:
    text = 'x_total{model_name="a\\"b,c",position="2"} 4e0\n'
    assert total(parse_prometheus(text), "x_total", position="2") == 4


def test_delta_and_acceptance() -> None:
    before = SpecCounters.from_samples(parse_prometheus(exposition(10, 30, 20, [9, 7, 4], 100)))
    after = SpecCounters.from_samples(parse_prometheus(exposition(110, 330, 270, [99, 87, 84], 500)))
    delta = after - before
    assert len(delta.accepted_per_pos) == 3
    assert delta.generation_tokens == 400
    acc = acceptance(delta)
    assert acc is not None
    assert acc.drafts == 100
    assert acc.rate == pytest.approx(250 / 300)
    assert acc.tokens_per_iteration == pytest.approx(1 + 250 / 100)
    assert acc.per_position == pytest.approx((0.90, 0.80, 0.80))


def test_no_speculation_means_no_acceptance() -> None:
    text = f"vllm:generation_tokens_total{{{LABELS}}} 50\n"
    counters = SpecCounters.from_samples(parse_prometheus(text))
    assert counters.accepted_per_pos == ()
    assert acceptance(counters - counters) is None


def test_counters_going_backwards_mean_a_restart() -> None:
    before = SpecCounters.from_samples(parse_prometheus(exposition(10, 30, 20, [9, 7, 4], 100)))
    after = SpecCounters.from_samples(parse_prometheus(exposition(5, 15, 10, [5, 3, 2], 40)))
    with pytest.raises(BenchError, match="restarted"):
        after - before


def test_position_count_change_is_an_error() -> None:
    before = SpecCounters.from_samples(parse_prometheus(exposition(10, 30, 20, [9, 7, 4], 100)))
    after = SpecCounters.from_samples(parse_prometheus(exposition(20, 70, 40, [9, 7, 4, 2, 1, 0, 0], 200)))
    with pytest.raises(BenchError, match="positions"):
        after - before
