"""`bench --decide`'s arms measured on simulator processes (no Docker) follow its model.

Each arm runs in its own local simulator process with the rendered speculative config;
`measure_point` (the sweep's measurement, with its /metrics sampler) reproduces the
single-stream rate of the simulator's model within 5% (like test_bench_local_sim's 3%),
the schedule's K per step shows in the /metrics counters, and the effective concurrency
shows the hybrid-model MTP cap. The rates under load are in benchmarks/bench_decide.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from composer.bench.sweep import BenchOptions, BenchPoint, Workload, measure_point
from tests.sim.simproc import serving

REPO = Path(__file__).resolve().parents[2]
SIM_SRC = REPO / "images" / "sim" / "src"
MODEL = REPO / "images" / "sim" / "models" / "Qwen3.8-27B"
KEY = "sk-local-decide-0123456789abcdef"
SCALE = 10.0
SCHEDULE = [[1, 2, 7], [3, 8, 3], [9, 512, 0]]

if str(SIM_SRC) not in sys.path:
    sys.path.insert(0, str(SIM_SRC))
from vllm.sim import adaptive  # noqa: E402
from vllm.sim.engine_types import SpecSetup  # noqa: E402
from vllm.sim.profiles import get_profile  # noqa: E402

pytestmark = pytest.mark.timing  # real-time rates: run alone, never beside a parallel pass


@contextmanager
def simulator(tmp_path: Path, spec: dict | None, **env_extra: str) -> Iterator[str]:
    env = {"SIM_TIME_SCALE": str(SCALE), "SIM_LOAD_SECONDS": "0", **env_extra}
    with serving(spec, api_key=KEY, log_dir=tmp_path, env=env) as url:
        yield url


def _measure(url: str, point: BenchPoint, streams: int, max_tokens: int = 400):
    options = BenchOptions(prompts=("one prompt", "another prompt"), max_tokens=max_tokens, runs=2, warmup=1)
    workload = Workload(None, streams) if streams > 1 else Workload()
    return measure_point(point, options, base_url=url, api_key=KEY, served_name="m", workload=workload)


def _model_per_stream(setup: SpecSetup, streams: int) -> float:
    return adaptive.aggregate_tok_s(get_profile(), setup, streams) / min(
        streams, adaptive.max_running(setup.method, setup.hybrid, 256)
    )


def test_dynamic_sd_and_adaptive_arms_match_the_model(tmp_path: Path) -> None:
    dsd_spec = {
        "method": "mtp",
        "num_speculative_tokens": 7,
        "num_speculative_tokens_per_batch_size": SCHEDULE,
    }
    dsd = SpecSetup("mtp", 7, None, tuple(map(tuple, SCHEDULE)), piecewise=True)
    with simulator(tmp_path, dsd_spec) as url:
        alone = _measure(url, BenchPoint("mtp-dsd", "mtp", 7), 1)
        assert alone.decode_tok_s / SCALE == pytest.approx(_model_per_stream(dsd, 1), rel=0.05)
        assert alone.acceptance is not None and alone.acceptance.draft_tokens == 7 * alone.acceptance.drafts
        busy = _measure(url, BenchPoint("mtp-dsd", "mtp", 7), 12, max_tokens=200)
        assert busy.max_running is not None and busy.max_running >= 9  # in the K=0 range
        tokens = sum(r.completion_tokens for r in busy.runs)
        drafts = busy.acceptance.drafts if busy.acceptance else 0
        assert drafts < 0.05 * tokens  # K=0 above 8 sequences: drafts only in the tail, as streams end
    adaptive_spec = {"method": "mtp", "num_speculative_tokens": 7, "enable_adaptive_verification": True}
    with simulator(tmp_path, adaptive_spec, VLLM_USE_V2_MODEL_RUNNER="1") as url:
        result = _measure(url, BenchPoint("mtp-adaptive", "mtp", 7), 1)
        model = _model_per_stream(SpecSetup("mtp", 7, adaptive=True), 1)
        assert result.decode_tok_s / SCALE == pytest.approx(model, rel=0.05)


def test_hybrid_mtp_runs_three_sequences_where_baseline_runs_all(tmp_path: Path) -> None:
    with simulator(tmp_path, {"method": "mtp", "num_speculative_tokens": 7}, SIM_HYBRID_MODEL="1") as url:
        mtp = _measure(url, BenchPoint("mtp", "mtp", 7), 8, max_tokens=200)
    with simulator(tmp_path, None, SIM_HYBRID_MODEL="1") as url:
        base = _measure(url, BenchPoint("baseline", None, 0), 8, max_tokens=200)
    assert mtp.max_running == 3
    assert base.max_running is not None and base.max_running > mtp.max_running
    assert base.aggregate_tok_s > mtp.aggregate_tok_s
