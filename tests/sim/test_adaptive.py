"""In-server adaptive speculation in the simulator: the published costs, vLLM's checks."""

from __future__ import annotations

import pytest
from vllm.config.speculative import ValidationError
from vllm.sim import adaptive, batching
from vllm.sim.engine import Engine, GenRequest, RequestStats, SpecSetup
from vllm.sim.logs import VllmLog
from vllm.sim.metrics import Metrics
from vllm.sim.profiles import get_profile
from vllm.sim.spec_setup import Runtime, resolve_spec
from vllm.sim.textgen import digest

REF = get_profile()
SCHEDULE = ((1, 2, 7), (3, 8, 3), (9, 512, 0))
MTP = SpecSetup("mtp", 7)
DSD = SpecSetup("mtp", 7, None, SCHEDULE, piecewise=True)


def test_dynamic_sd_on_v1_runner_costs_the_published_single_stream_share() -> None:
    ratio = adaptive.aggregate_tok_s(REF, DSD, 1) / adaptive.aggregate_tok_s(REF, MTP, 1)
    assert ratio == pytest.approx(50.0 / 59.6, rel=0.005)  # vllm#49548
    full_graphs = SpecSetup("mtp", 7, None, SCHEDULE)  # V2 runner: no piecewise fallback
    assert adaptive.aggregate_tok_s(REF, full_graphs, 1) == pytest.approx(
        adaptive.aggregate_tok_s(REF, MTP, 1)
    )


@pytest.mark.parametrize(("streams", "tax"), [(2, 0.066), (189, 0.216)])
def test_a_k0_step_costs_the_published_tpot_overhead(streams: int, tax: float) -> None:
    off = SpecSetup("mtp", 7, None, ((1, 1, 7), (2, 1024, 0)), piecewise=True)
    plain = adaptive.aggregate_tok_s(REF, SpecSetup(), streams)
    assert plain / adaptive.aggregate_tok_s(REF, off, streams) == pytest.approx(1 + tax, rel=1e-6)


def test_adaptive_verification_gains_at_64_and_costs_at_low_concurrency() -> None:
    on = SpecSetup("dflash", 7, 8, adaptive=True)
    static = SpecSetup("dflash", 7, 8)
    gain = adaptive.aggregate_tok_s(REF, on, 64) / adaptive.aggregate_tok_s(REF, static, 64) - 1
    assert 0.15 <= gain <= 0.22
    for streams in (1, 2, 4, 8):
        cost = 1 - adaptive.aggregate_tok_s(REF, on, streams) / adaptive.aggregate_tok_s(REF, static, streams)
        assert 0.04 <= cost <= 0.08


def test_hybrid_mtp_runs_three_sequences_and_loses_to_baseline_at_16() -> None:
    hybrid = SpecSetup("mtp", 7, hybrid=True)
    assert adaptive.max_running("mtp", True, 256) == 3
    assert adaptive.max_running(None, True, 256) == 256
    assert adaptive.aggregate_tok_s(REF, hybrid, 16) < adaptive.aggregate_tok_s(REF, SpecSetup(), 16)
    assert adaptive.aggregate_tok_s(REF, hybrid, 16) == adaptive.aggregate_tok_s(REF, hybrid, 4)
    engine = Engine(REF, hybrid, Metrics("m", 7), 1e6, max_num_seqs=256)
    assert engine.scheduler._max_seqs == 3


def test_schedule_k_is_the_range_of_the_running_batch() -> None:
    assert [adaptive.k_at(SCHEDULE, 7, n) for n in (1, 2, 3, 8, 9, 600)] == [7, 7, 3, 3, 0, 0]
    assert adaptive.k_at(((1, 4, 9),), 5, 2) == 5  # vLLM clamps K to num_speculative_tokens


def test_a_k0_range_drafts_nothing_and_still_generates() -> None:
    engine = Engine(REF, SpecSetup("mtp", 7, None, ((1, 4, 0), (5, 512, 7))), Metrics("m", 7), 1e6)
    stats = RequestStats()
    steps = list(engine.generate(GenRequest(digest("p"), 10, 30, True), stats))
    assert sum(len(s.tokens) for s in steps) == 30
    assert engine.metrics.drafts == 0 and stats.draft_tokens == 0


def _resolve(extra: dict, runtime: Runtime | None = None):
    raw = {"method": "mtp", "num_speculative_tokens": 7, **extra}
    return resolve_spec(raw, {}, "FLASH_ATTN", VllmLog("APIServer"), runtime)


def test_schedule_and_adaptive_reach_the_engine_setup() -> None:
    setup = _resolve({"num_speculative_tokens_per_batch_size": [[9, 512, 0], [1, 8, 3]]}).setup
    assert setup.schedule == ((1, 8, 3), (9, 512, 0)) and setup.piecewise
    assert not _resolve({"num_speculative_tokens_per_batch_size": [[1, 9, 3]]}, Runtime("1")).setup.piecewise
    assert _resolve({"enable_adaptive_verification": True}).setup.adaptive


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ([[1, 4, 3], [4, 8, 0]], "Batch-size ranges must be non-overlapping and sorted."),
        ([[2, 8, 3]], "The first batch-size range must start at 1"),
        ([[1, 8, -1]], "values must be >= 0"),
        ([[1, 8]], "3-item sequence"),
    ],
)
def test_bad_schedules_fail_with_vllms_messages(schedule: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _resolve({"num_speculative_tokens_per_batch_size": schedule})


def test_adaptive_verification_refused_with_enforce_eager_and_v1_runner() -> None:
    with pytest.raises(ValueError, match="Adaptive verification requires full CUDA graphs"):
        _resolve({"enable_adaptive_verification": True}, Runtime(enforce_eager=True))
    with pytest.raises(ValueError, match="Model Runner V1 does not support: adaptive draft verification"):
        _resolve({"enable_adaptive_verification": True}, Runtime("0"))


def test_the_removed_disable_by_batch_size_key_is_an_unknown_field() -> None:
    with pytest.raises(ValidationError, match="extra_forbidden"):
        _resolve({"speculative_disable_by_batch_size": 4})


def test_hybrid_checkpoint_detection() -> None:
    assert adaptive.is_hybrid({"text_config": {"full_attention_interval": 4, "linear_num_value_heads": 48}})
    assert adaptive.is_hybrid({"layer_types": ["linear_attention", "full_attention"]})
    assert not adaptive.is_hybrid({"num_hidden_layers": 64})


def test_plain_batching_is_unchanged_without_the_new_fields() -> None:
    for streams in (1, 8, 64):
        assert adaptive.aggregate_tok_s(REF, MTP, streams) == pytest.approx(
            batching.aggregate_tok_s(REF, "mtp", 7, streams)
        )
