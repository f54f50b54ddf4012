"""The figures the simulator exists to reproduce, measured from outside as `bench` does:
tokens per iteration from /metrics deltas around each streamed request, and the decode rate
those iterations give under the timing model (no wall clock)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from vllm.sim import timing
from vllm.sim.profiles import get_profile

from composer.bench.prompts import BUILTIN_PROMPTS, padded

from .conftest import MODELS
from .simproc import SimProcess, metric

PROFILE = get_profile("qwen3.8-27b")
PROMPTS = [
    *BUILTIN_PROMPTS,
    *(padded(p, 2000) for p in BUILTIN_PROMPTS),
    *(f"question {i}" for i in range(14)),
]


@pytest.fixture(scope="module")
def mtp7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    config = json.dumps({"method": "mtp", "num_speculative_tokens": 7})
    server = SimProcess.start(
        [str(MODELS / "Qwen3.8-27B"), "--served-model-name", "m", "--max-model-len", "32k", "-sc", config],
        env={"SIM_TIME_SCALE": "200"},
        log_dir=tmp_path_factory.mktemp("logs"),
    )
    yield server.wait_ready()
    server.stop()


def counters(server: SimProcess) -> tuple[float, float, float]:
    seen = server.metrics()
    return (
        metric(seen, "vllm:generation_tokens_total"),
        metric(seen, "vllm:spec_decode_num_drafts_total"),
        metric(seen, "vllm:spec_decode_num_accepted_tokens_total"),
    )


@pytest.mark.parametrize("max_tokens", [200, 512])
def test_mtp_k7_measures_the_27b_profile_within_2_percent_for_every_prompt(
    mtp7: SimProcess, max_tokens
) -> None:
    """It once measured 55.5 tok/s and 4.52 tokens per iteration: a 200-token request whose
    acceptance phase (hashed from its prompt) took 44 iterations for its 199 tokens after the
    first. The bench's requests (greedy, EOS ignored, streamed), one at a time."""
    assert round(timing.tokens_per_iteration(PROFILE, "mtp", 7), 2) == 4.82
    assert timing.decode_tok_s(PROFILE, "mtp", 7) == pytest.approx(59.2)
    iteration_s = timing.iteration_seconds(PROFILE, "mtp", 7)
    for prompt in PROMPTS:
        before = counters(mtp7)
        request = {
            "model": "m",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
        }
        status, _ = mtp7.request("POST", "/v1/chat/completions", request, timeout=120)
        assert status == 200
        tokens, drafts, accepted = (a - b for a, b in zip(counters(mtp7), before, strict=True))
        assert tokens == max_tokens
        # as bench measures them: 1 + accepted / drafts, and the tokens after the first over
        # the time of the iterations that made them
        assert 1 + accepted / drafts == pytest.approx(4.82, rel=0.02), prompt[-60:]
        assert (tokens - 1) / (drafts * iteration_s) == pytest.approx(59.2, rel=0.02), prompt[-60:]
