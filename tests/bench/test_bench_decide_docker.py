"""`compose-spec bench --decide` on Docker with the simulator in its hybrid-model setting.

One short run (two workloads, one request per stream): the arms are swapped in through
`up`; on a hybrid model vLLM refuses adaptive verification at startup (its GDN backend
cannot take device-decided query lengths), so that arm fails fast with vLLM's line and the
command exits 1 naming it, while the decision over the other arms is still written; the
hybrid model's MTP cap shows in the effective concurrency read from /metrics, so baseline
wins at 16 streams. The simulator image is VLLM_IMAGE when set (an image built from this
tree), else vllm-sim:latest.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.bench.test_bench_docker import make_stack  # noqa: F401  (the fixture)
from tests.conftest import REPO

pytestmark = pytest.mark.docker


def test_decide_on_the_hybrid_simulator_prefers_baseline_at_16_streams(make_stack, docker_client) -> None:  # noqa: F811
    stack = make_stack({"SIM_TIME_SCALE": "10", "SIM_HYBRID_MODEL": "1"})
    stack.extra.write_text(stack.extra.read_text() + (REPO / "adaptive.toml").read_text())
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
    bench = json.loads((stack.out / "bench.json").read_text())
    assert len(bench["swap_seconds"]) == 3 and decided["trace"]["switch_s"] > 0
    assert stack.running(docker_client) == []  # nothing served before: nothing is left running
