"""The figures the simulator exists to reproduce, measured from outside as `bench` does:
tokens per iteration from /metrics deltas around streamed requests, and the decode rate
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


@pytest.mark.parametrize("prompt_tokens", [None, 2000])
def test_mtp_k7_measures_the_27b_profile_within_2_percent(mtp7: SimProcess, prompt_tokens) -> None:
    before = counters(mtp7)
    prompts = [p if prompt_tokens is None else padded(p, prompt_tokens) for p in BUILTIN_PROMPTS]
    for prompt in prompts:  # the bench's requests: greedy, EOS ignored, 512 tokens, streamed
        request = {
            "model": "m",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 512,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
        }
        status, _ = mtp7.request("POST", "/v1/chat/completions", request, timeout=120)
        assert status == 200
    tokens, drafts, accepted = (a - b for a, b in zip(counters(mtp7), before, strict=True))
    assert tokens == 512 * len(prompts)
    per_iteration = 1 + accepted / drafts
    # decode speed as bench measures it: the tokens after each first over the iterations' time
    tok_s = (tokens - len(prompts)) / (drafts * timing.iteration_seconds(PROFILE, "mtp", 7))
    assert per_iteration == pytest.approx(timing.tokens_per_iteration(PROFILE, "mtp", 7), rel=0.02)
    assert tok_s == pytest.approx(timing.decode_tok_s(PROFILE, "mtp", 7), rel=0.02)
    assert (
        round(timing.tokens_per_iteration(PROFILE, "mtp", 7), 2),
        timing.decode_tok_s(PROFILE, "mtp", 7),
    ) == (
        4.82,
        pytest.approx(59.2),
    )
