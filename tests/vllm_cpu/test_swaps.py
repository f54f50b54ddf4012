"""Swaps, rollbacks and a K sweep of real vLLM (CPU build, tiny checkpoints) through `compose-spec`.

The tier's one stack (`cpu_stack`, the gateway in front) serves every test here, and each
`up` that needs a boot is there for a reason, since a boot takes about a minute on 2 cores.
test_server.py leaves ngram serving; from there ngram -> baseline -> draft -> ngram, then
two failing variants that roll back to ngram: vLLM's own argument parser rejects an unknown
flag, and a checkpoint with head_dim 16 passes /health and dies on the gate's first
completion. Last, `bench` sweeps ngram's K (1, 2, 3) and ends on the K that served before,
so its restore is a no-op.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from composer.engine import bootlog
from tests.conftest import REPO
from tests.vllm_cpu.stack import Stack, assert_speculates, spec_counters

pytestmark = [pytest.mark.docker, pytest.mark.vllm_cpu]

K = 3
SWEEP = (1, 2, 3)


@pytest.fixture
def stack(cpu_stack: Stack) -> Stack:
    """The tier's shared stack."""
    return cpu_stack


def assert_ok(
    done: subprocess.CompletedProcess[str], result: dict, variant: str, previous: str | None
) -> None:
    """A successful swap's `--json` outcome."""
    assert done.returncode == 0, done.stderr[-3000:]
    assert result["variant"] == variant
    assert result["previous"] == previous
    assert result["outcome"] in ("started", "swapped"), result
    assert result["timings"]["start_to_ready"] > 0


def test_swaps_ngram_baseline_draft_ngram(stack: Stack):
    stack.ensure_serving("ngram")  # a no-op after test_server.py
    assert stack.serving() == "ngram"

    # the KV-size check reads the real line: expecting more than 256 MiB holds warns
    done, result = stack.up("baseline", "variants.baseline.min_kv_cache_tokens=200000")
    assert_ok(done, result, "baseline", "ngram")
    assert result["kv_cache_tokens"] == 131_072
    assert any("131,072 tokens, below the expected 200,000" in w for w in result["warnings"]), result
    assert stack.serving() == "baseline"
    assert not any(k.startswith("vllm:spec_decode") for k in spec_counters(stack.url))
    stack.complete(8)

    done, result = stack.up("draft")
    assert_ok(done, result, "draft", "baseline")
    assert 80_000 <= result["kv_cache_tokens"] < 131_072, result  # the draft's layer takes its share
    assert not result["warnings"], result
    assert stack.serving() == "draft"
    assert_speculates(stack, K)
    logs = stack.run("logs", timeout=120)
    assert logs.returncode == 0, logs.stderr
    assert bootlog.boot_stage(logs.stdout) == "server ready"
    assert bootlog.kv_cache_tokens(logs.stdout) == result["kv_cache_tokens"]
    assert stack.api_key not in logs.stdout + done.stdout + done.stderr

    done, result = stack.up("ngram")
    assert_ok(done, result, "ngram", "draft")
    assert result["kv_cache_tokens"] == 131_072 and not result["warnings"], result
    assert stack.serving() == "ngram"
    assert_speculates(stack, K)


def assert_rolled_back(
    stack: Stack, done: subprocess.CompletedProcess[str], result: dict, failed: str, previous: str
) -> None:
    """exit 1, the rollback said, the previous variant serving and answering."""
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
    assert result["exit_code"] == 1
    assert result["error"].startswith(f"{failed} failed:"), result["error"]
    assert f"rolled back to {previous}, which serves again" in result["error"]
    assert stack.serving() == previous
    stack.complete(4)


def test_failing_variants_roll_back(stack: Stack):
    stack.ensure_serving("ngram")  # a no-op after the swap test
    previous = stack.serving()

    # vLLM's own parser: exit 2 within seconds, `vllm: error: unrecognized arguments`
    done, result = stack.up("badflag")
    assert_rolled_back(stack, done, result, "badflag", previous)
    assert "vllm: error: unrecognized arguments: --no-such-flag" in result["log_tail"]
    assert any("does not know one of the rendered flags" in h for h in result["hints"]), result["hints"]
    assert "unrecognized arguments: --no-such-flag" in done.stderr

    # head_dim 16: /health passes, the gate's one-token completion kills the engine
    hd16 = str(REPO / ".composer" / "models-cpu" / "qwen3-tiny-hd16")
    done, result = stack.up("hd16", f"stack.model_dir={hd16}")
    assert_rolled_back(stack, done, result, "hd16", previous)
    assert "Unsupported CPU attention configuration: head_dim=16" in result["log_tail"]
    assert any("head_dim" in h for h in result["hints"]), result["hints"]
    assert stack.api_key not in done.stdout + done.stderr


def test_bench_k_sweep_reads_the_real_counters_and_finds_the_best(stack: Stack, tmp_path: Path):
    """ngram K=1,2,3 through `bench`: acceptance and the served K come from the real counters.

    Real ngram drafts fewer than K tokens on a step whose match is short, so the served K is
    read from the per-position counter (positions 0..K-1), not from draft tokens per draft.
    The sweep ends on K=3, what served before, so the bench's restore boots nothing.
    """
    stack.ensure_serving("ngram")
    done = stack.run(
        *("bench", "--variants", "ngram", "--k", ",".join(map(str, SWEEP)), "--runs", "2", "--warmup", "1"),
        *("--max-tokens", "96", "--json", "--out", str(tmp_path)),
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads(done.stdout[done.stdout.index("{") :])
    points = {p["k"]: p for p in report["points"] if p["variant"] == "ngram"}
    assert sorted(points) == list(SWEEP), report["points"]
    for k, point in points.items():
        assert point["error"] is None, point
        assert point["drafts"] > 0 and len(point["per_position"]) == k, point
        assert 0 < point["draft_tokens"] <= k * point["drafts"], point
        assert 0 <= point["accepted"] <= point["draft_tokens"], point
        assert point["acceptance_rate"] == pytest.approx(point["accepted"] / point["draft_tokens"], abs=1e-3)
        # tokens per step = 1 + accepted / drafts; per position: accepted at i / drafts
        assert point["tokens_per_iteration"] == pytest.approx(
            1 + point["accepted"] / point["drafts"], abs=1e-3
        )
        assert sum(point["per_position"]) == pytest.approx(point["accepted"] / point["drafts"], abs=1e-3)
        assert point["decode_tok_s"] > 0
    # real ngram proposes fewer than K tokens on some steps: K read from draft tokens per
    # draft would be below the swept K, and the per-position counter still gives it
    assert any(p["draft_tokens"] < k * p["drafts"] for k, p in points.items() if k > 1), points
    fastest = max(points.values(), key=lambda p: p["decode_tok_s"])
    assert report["best_k"] == {"ngram": fastest["k"]}, (report["best_k"], points)
    assert (tmp_path / "bench.json").is_file() and (tmp_path / "bench.csv").is_file()
    for k, p in sorted(points.items()):  # the sweep's figures, shown with `pytest -rP`
        print(
            f"ngram K={k}: {p['decode_tok_s']} tok/s, {p['tokens_per_iteration']} tok/step, "
            f"acceptance {p['acceptance_rate']}, {p['draft_tokens']} draft tokens in {p['drafts']} drafts, "
            f"{p['accepted']} accepted, per position {p['per_position']}"
        )
    print(f"best K: {report['best_k']}")
    assert "restoring ngram" in done.stderr, done.stderr[-3000:]
    assert stack.serving() == "ngram"  # the bench restored what served before
