"""measure_point against the simulator run as a local subprocess (no Docker)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from composer.bench.sweep import BenchOptions, BenchPoint, Workload, measure_point
from composer.errors import BenchError
from tests.sim.simproc import serving

# Real-time checks of the timing model: make check runs them alone, after the parallel pass.
pytestmark = pytest.mark.timing

REPO = Path(__file__).resolve().parents[2]
SIM_SRC = REPO / "images" / "sim" / "src"
MODEL = REPO / "images" / "sim" / "models" / "Qwen3.8-27B"
KEY = "sk-local-bench-0123456789abcdef"
SCALE = 40.0


@pytest.fixture(scope="module")
def mtp7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A simulator serving MTP K=7 on a free port; yields its base URL."""
    spec = {"method": "mtp", "num_speculative_tokens": 7}
    env = {"SIM_TIME_SCALE": str(SCALE), "SIM_LOAD_SECONDS": "0"}
    with serving(spec, api_key=KEY, log_dir=tmp_path_factory.mktemp("sim"), env=env, timeout=20) as url:
        yield url


def sim_timing():
    if str(SIM_SRC) not in sys.path:
        sys.path.insert(0, str(SIM_SRC))
    from vllm.sim import profiles, timing

    return timing, profiles.get_profile()


def _measure(url: str, k: int, options: BenchOptions, api_key: str = KEY, **more: Any):
    """measure_point of MTP K=`k` on the simulator at `url` (served as "m")."""
    return measure_point(
        BenchPoint("mtp", "mtp", k), options, base_url=url, api_key=api_key, served_name="m", **more
    )


def test_measure_point_matches_the_timing_model(mtp7: str) -> None:
    timing, profile = sim_timing()
    options = BenchOptions(prompts=("one prompt", "another prompt"), max_tokens=800, runs=3, warmup=1)
    messages: list[str] = []
    result = _measure(mtp7, 7, options, progress=messages.append)
    assert result.decode_tok_s / SCALE == pytest.approx(timing.decode_tok_s(profile, "mtp", 7), rel=0.03)
    assert result.tokens_per_iteration == pytest.approx(
        timing.tokens_per_iteration(profile, "mtp", 7), rel=0.03
    )
    assert result.acceptance.per_position == pytest.approx(timing.acceptance(profile, "mtp", 7), abs=0.03)
    assert result.deterministic is True  # the warm-up and run 1 use the same prompt
    assert sorted(result.texts) == [0, 1]
    assert messages[0].startswith("mtp K=7: warm-up 1/1") and messages[-1].startswith("mtp K=7: run 3/3")


def test_wrong_k_on_the_server_is_an_error(mtp7: str) -> None:
    options = BenchOptions(prompts=("p",), max_tokens=50, runs=1, warmup=0)
    with pytest.raises(BenchError, match="shows 7 draft token"):
        _measure(mtp7, 3, options)


def test_rejected_api_key_is_an_error(mtp7: str) -> None:
    options = BenchOptions(prompts=("p",), max_tokens=50, runs=1, warmup=0)
    with pytest.raises(BenchError, match="401"):
        _measure(mtp7, 7, options, api_key="sk-wrong")


def test_concurrent_streams_share_the_batch(mtp7: str) -> None:
    """Four streams at once: each one decodes slower than alone, all together faster (the
    simulator's batching model), and every request of every stream is counted once."""
    _, profile = sim_timing()
    from vllm.sim import batching

    options = BenchOptions(prompts=("one prompt", "another prompt"), max_tokens=300, runs=2, warmup=1)
    messages: list[str] = []
    result = _measure(mtp7, 7, options, progress=messages.append, workload=Workload(200, 4))
    assert len(result.runs) == 8 and all(r.completion_tokens == 300 for r in result.runs)
    assert all(r.prompt_tokens >= 200 for r in result.runs)
    alone, together = 59.2, batching.aggregate_tok_s(profile, "mtp", 7, 4)
    assert result.decode_tok_s / SCALE < 0.95 * alone
    assert 0.6 * together < result.aggregate_tok_s / SCALE < 1.05 * together
    assert result.aggregate_tok_s > 2 * result.decode_tok_s
    assert result.acceptance is not None and result.deterministic is True
    assert messages[-1].startswith("mtp K=7 [200 tok x 4 streams]: run 8/8")
