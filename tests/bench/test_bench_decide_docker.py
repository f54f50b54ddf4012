"""`compose-spec bench --decide` on Docker with the simulator in its hybrid-model setting.

One short run (two workloads, one request per stream): the arms are swapped in through
`up`; on a hybrid model vLLM refuses adaptive verification at startup (its GDN backend
cannot take device-decided query lengths), so that arm fails fast with vLLM's line and the
command exits 1 naming it, while the decision over the other arms is still written; the
hybrid model's MTP cap shows in the effective concurrency read from /metrics, so baseline
wins at 16 streams; the switching arm is measured over the trace (128 tok x 1 -> x 16 -> x 1)
through the gateway with the automatic policy between baseline and MTP. The simulator image is VLLM_IMAGE when set (an image built from this
tree), else vllm-sim:latest.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.bench.test_bench_decide import SpecSetup, adaptive, get_profile
from tests.bench.test_bench_docker import make_stack  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.docker, pytest.mark.timing]  # real-time rates: run alone


def test_decide_on_the_hybrid_simulator_prefers_baseline_at_16_streams(make_stack, docker_client) -> None:  # noqa: F811
    stack = make_stack({"SIM_TIME_SCALE": "10", "SIM_HYBRID_MODEL": "1"})
    if os.environ.get("VLLM_IMAGE"):
        stack.env["VLLM_IMAGE"] = os.environ["VLLM_IMAGE"]
    done = stack.run(
        "bench",
        "--decide",
        "--variants",
        "baseline,mtp,mtp-dsd,mtp-adaptive",
        "--k",
        "7",
        "--concurrency",
        "1,16",
        "--prompt-tokens",
        "128",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--max-tokens",
        "300",
        "--out",
        str(stack.out),
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 point(s) failed: mtp-adaptive K=7" in done.stderr
    assert "GDNAttentionBackend attention backend does not support" in done.stderr  # vLLM's line, shown
    decided = json.loads((stack.out / "decide.json").read_text())
    assert "decision: " + decided["decision"]["line"] in done.stdout
    assert set(decided["arms"]) == {"baseline", "mtp K=7", "mtp-dsd"}
    assert set(decided["trace"]["goodput_tok_s"]) == {*decided["arms"], "switching"}
    line = decided["decision"]["line"]
    assert line.startswith(("pin ", "switch: +")), line
    at16 = {arm: next(c for c in cells if c["concurrency"] == 16) for arm, cells in decided["arms"].items()}
    assert at16["mtp K=7"]["max_running"] == 3 < at16["baseline"]["max_running"]
    assert decided["best_by_concurrency"]["16"] == "baseline"
    # the switching arm, measured: the trace through the gateway with the automatic policy
    run = decided["trace"]["switching_run"]
    assert run["arms"] == ["baseline", "mtp K=7"] and run["complete"] and run["failed_requests"] == 0, run
    assert run["workloads"] == {"chat128-1": "mtp", "chat128-16": "baseline"}
    assert run["switches"] > 0 and decided["trace"]["switches"] == run["switches"]
    assert run["switched_to"][0] == "baseline"  # the busy phase moves to baseline first
    assert decided["trace"]["goodput_tok_s"]["switching"] == run["goodput_tok_s"] > 0
    assert "switching" in done.stdout and "measured (baseline <-> mtp K=7" in done.stdout
    # the first phase runs on mtp before any switch: its time per output token is the simulator
    # model's for MTP K=7 at one stream (time scale 10), within 5%
    first = run["phases"][0]
    model_ms = 1000 / (adaptive.aggregate_tok_s(get_profile(), SpecSetup("mtp", 7, hybrid=True), 1) * 10)
    assert first["switches"] == 0 and first["tokens"] == 16 * 300
    assert first["tpot_p50_ms"] == pytest.approx(model_ms, rel=0.05)
    # switches cost time the single arms' prediction charges too: the measured run is not faster
    assert run["goodput_tok_s"] <= decided["trace"]["switching_predicted_tok_s"] * 1.05
    assert run["tpot_p50_ms"] > 0 and run["ttft_p95_s"] >= run["ttft_p50_s"] and run["held_request_s"] >= 0
    bench = json.loads((stack.out / "bench.json").read_text())
    assert len(bench["swap_seconds"]) == 3 and decided["trace"]["switch_s"] > 0
    assert stack.running(docker_client) == []  # nothing served before: nothing is left running
