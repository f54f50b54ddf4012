"""The batching model (pure): single-stream calibration kept, crossover, prefill cost."""

from __future__ import annotations

import json
import threading
import time

import pytest
from vllm.sim import batching, timing
from vllm.sim.engine import Engine, GenRequest, SpecSetup
from vllm.sim.metrics import Metrics
from vllm.sim.profiles import get_profile, load_profile_file, resolve_profile
from vllm.sim.textgen import digest

REF = get_profile()

# (method, K, block size) -> single-stream tok/s measured on the reference machine.
SINGLE_STREAM = {(None, 0, None): 29.4, ("mtp", 7, None): 59.2, ("dflash", 7, 8): 58.5}


@pytest.mark.parametrize(("method", "k", "block"), sorted(SINGLE_STREAM, key=str))
def test_single_stream_calibration_is_unchanged(method: str | None, k: int, block: int | None) -> None:
    one = batching.aggregate_tok_s(REF, method, k, 1, block)
    assert one == pytest.approx(timing.decode_tok_s(REF, method, k, block), rel=1e-9)
    assert one == pytest.approx(SINGLE_STREAM[(method, k, block)], rel=0.03)


def test_mtp_k7_pays_at_one_and_four_streams_and_stops_before_sixteen() -> None:
    def ratio(streams: int) -> float:
        return batching.aggregate_tok_s(REF, "mtp", 7, streams) / batching.aggregate_tok_s(
            REF, None, 0, streams
        )

    assert ratio(1) > 1.9
    assert ratio(4) > 1.2
    assert ratio(16) < 0.9
    crossover = batching.crossover_streams(REF, "mtp", 7)
    assert crossover is not None and 4 < crossover <= 16
    # The speed-up falls monotonically with concurrency.
    ratios = [ratio(n) for n in (1, 2, 4, 8, 16, 32)]
    assert ratios == sorted(ratios, reverse=True)


def test_dflash_also_crosses_over_and_smaller_k_pays_longer() -> None:
    dflash = batching.crossover_streams(REF, "dflash", 7, 8)
    assert dflash is not None and 4 < dflash <= 16
    k3 = batching.crossover_streams(REF, "mtp", 3)
    k7 = batching.crossover_streams(REF, "mtp", 7)
    assert k3 is not None and k7 is not None and k3 > k7


def test_step_time_is_flat_then_linear() -> None:
    one = batching.forward_seconds(REF, 1)
    knee = REF.batching.compute_knee_tokens
    assert batching.forward_seconds(REF, knee) / one < 1.05  # memory bound: nearly flat
    below = batching.forward_seconds(REF, knee) - batching.forward_seconds(REF, knee - 1)
    above = batching.forward_seconds(REF, knee + 101) - batching.forward_seconds(REF, knee + 100)
    assert above > 10 * below
    assert above == pytest.approx(
        (REF.batching.compute_ms_per_token + REF.batching.memory_ms_per_token) / 1000
    )


def test_a_speculative_step_verifies_k_plus_one_tokens_per_sequence() -> None:
    assert batching.decode_tokens("mtp", 7, 16) == 128
    assert batching.decode_tokens(None, 0, 16) == 16
    # Same number of sequences, more tokens: a speculative step costs more.
    assert batching.decode_seconds(REF, "mtp", 7, 16) > batching.decode_seconds(REF, None, 0, 16) * 4


def test_prefill_shares_the_step() -> None:
    alone = batching.step_seconds(REF, None, 0, decode_seqs=0, prefill_tokens=2000)
    assert alone == pytest.approx(timing.ttft_seconds(REF, 2000))
    mixed = batching.step_seconds(REF, None, 0, decode_seqs=1, prefill_tokens=2047)
    assert mixed == pytest.approx(1 / 29.4 + 2047 / REF.prefill_tok_s)
    assert mixed > 10 * batching.step_seconds(REF, None, 0, decode_seqs=1, prefill_tokens=0)


def test_profile_file_and_env_override_batching(tmp_path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"base": "qwen3.8-27b", "batching": {"compute_knee_tokens": 64}}))
    profile = load_profile_file(path)
    assert profile.batching.compute_knee_tokens == 64
    assert profile.batching.compute_ms_per_token == REF.batching.compute_ms_per_token
    later = batching.crossover_streams(profile, "mtp", 7)
    assert later is not None and later > batching.crossover_streams(REF, "mtp", 7)
    env = resolve_profile(None, str(path), "compute_ms_per_token=0.5, max_num_seqs=8")
    assert (env.batching.compute_knee_tokens, env.batching.compute_ms_per_token) == (64, 0.5)
    assert env.batching.max_num_seqs == 8
    with pytest.raises(ValueError, match=r"unknown batching key.*allowed: compute_knee_tokens"):
        resolve_profile(None, None, "knee=3")
    with pytest.raises(ValueError, match="not KEY=VALUE"):
        resolve_profile(None, None, "compute_knee_tokens")


def test_concurrent_requests_share_steps() -> None:
    """Eight requests submitted together run in common steps (8 tokens per step)."""
    metrics = Metrics("m", 0)
    engine = Engine(REF, SpecSetup(), metrics, time_scale=1e4)
    results: dict[int, int] = {}

    def run(i: int) -> None:
        steps = list(engine.generate(GenRequest(digest(f"c{i}"), 10, 40, ignore_eos=True)))
        results[i] = sum(len(s.tokens) for s in steps)

    engine.scheduler.pause()  # hold them so that all eight arrive before the first step
    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60  # thread start-up is slow on a loaded machine
    # the gauge follows the queue once each submitting thread gets to it: wait for both
    while (engine.scheduler.counts(), metrics.waiting) != ((0, 8), 8) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.scheduler.counts() == (0, 8) and metrics.waiting == 8
    engine.resume()
    for thread in threads:
        thread.join(timeout=30)
    assert results == dict.fromkeys(range(8), 40)
    hist = metrics.iteration_tokens
    # One prefill step for all eight, then 39 decode steps of 8 tokens each.
    assert hist.total == 40
    assert hist.counts[hist.buckets.index(8.0)] == 39
    assert metrics.running == 0 and metrics.finished["length"] == 8
