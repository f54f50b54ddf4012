"""Swaps and rollbacks of real vLLM (CPU build, tiny checkpoints) through `compose-spec up`.

One stack (its own project and port, the gateway in front) serves every test here; each
`up` that needs a boot is there for a reason, since a boot takes about a minute on 2 cores:
baseline -> ngram -> draft -> baseline, then two failing variants that roll back to the one
serving. The failures are real: vLLM's own argument parser rejects an unknown flag, and a
checkpoint with head_dim 16 passes /health and dies on the gate's first completion.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from composer.engine import bootlog
from tests.conftest import REPO
from tests.vllm_cpu.conftest import port_in_range
from tests.vllm_cpu.test_server import HOST_VARS, SERVED, remove_project, spec_counters

pytestmark = [pytest.mark.docker, pytest.mark.vllm_cpu]

K = 3
FAILING = """
[variants.badflag]
description = "a flag vLLM's argument parser rejects"
extends = "baseline"
extra_args = ["--enforce-eager", "--dtype", "float32", "--no-such-flag"]

[variants.hd16]
description = "the tiny Qwen3 with head_dim 16 (set stack.model_dir to it): no CPU attention kernel"
extends = "baseline"
"""


@dataclass
class Stack:
    """The command line and environment of one compose-spec stack."""

    project: str
    url: str
    api_key: str
    env: dict[str, str]
    args: list[str]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def run(self, *extra: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.args, *extra], capture_output=True, text=True, env=self.env, cwd=REPO, timeout=timeout
        )

    def up(self, variant: str, *sets: str) -> tuple[subprocess.CompletedProcess[str], dict]:
        """`up VARIANT --json` (with --set options); the process and its JSON object."""
        flags = [x for s in sets for x in ("--set", s)]
        done = self.run(*flags, "up", variant, "--json")
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        assert lines, f"no JSON from up {variant}: {done.stdout[-2000:]} {done.stderr[-3000:]}"
        return done, json.loads(lines[-1])

    def serving(self) -> str:
        """The variant `status --json` reports ready (asserts it is)."""
        status = self.run("status", "--json", timeout=120)
        assert status.returncode == 0, status.stderr
        data = json.loads(status.stdout)
        assert data["health"] == "ready", data
        return data["variant"]

    def complete(self, tokens: int) -> dict:
        """A greedy completion of `tokens` tokens through the gateway."""
        body = {"model": SERVED, "prompt": "hello world the model", "max_tokens": tokens}
        body |= {"temperature": 0, "ignore_eos": True}
        done = httpx.post(f"{self.url}/v1/completions", json=body, headers=self.headers, timeout=180)
        assert done.status_code == 200, done.text
        assert done.json()["usage"]["completion_tokens"] == tokens
        return done.json()


@pytest.fixture(scope="module")
def stack(cpu_models: Path, docker_client, tmp_path_factory) -> Iterator[Stack]:
    """A stack on .env.cpu + cpu.toml + the failing variants; nothing started yet."""
    project = f"hcpu-{uuid.uuid4().hex[:8]}"
    state = tmp_path_factory.mktemp("state")
    failing = state / "failing.toml"
    failing.write_text(FAILING)
    env = {k: v for k, v in os.environ.items() if k not in HOST_VARS}
    env.update(
        VLLM_API_KEY=secrets.token_urlsafe(32),
        XDG_STATE_HOME=str(state),
        XDG_RUNTIME_DIR=str(state),
        PYTHONPATH=str(REPO),
    )
    port = port_in_range()
    args = [sys.executable, "-m", "composer", "--env-file", str(REPO / ".env.cpu")]
    args += ["--stack", "composer.toml", "--stack", "images/vllm-cpu/cpu.toml", "--stack", str(failing)]
    args += ["--set", f"stack.project={project}", "--set", f"stack.port={port}"]
    made = Stack(project, f"http://127.0.0.1:{port}", env["VLLM_API_KEY"], env, args)
    try:
        yield made
    finally:
        made.run("down", timeout=300)
        remove_project(docker_client, project)


def assert_speculates(stack: Stack) -> None:
    """A completion moves the real spec-decode counters, read through the gateway."""
    before = spec_counters(stack.url)
    stack.complete(64)
    after = spec_counters(stack.url)
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    drafts = delta["vllm:spec_decode_num_drafts_total"]
    proposed = delta["vllm:spec_decode_num_draft_tokens_total"]
    accepted = delta["vllm:spec_decode_num_accepted_tokens_total"]
    assert delta["vllm:generation_tokens_total"] == 64
    assert drafts > 0 and 0 < proposed <= K * drafts
    assert 0 <= accepted <= proposed
    assert sum(v for k, v in delta.items() if "per_pos" in k) == accepted


def assert_ok(
    done: subprocess.CompletedProcess[str], result: dict, variant: str, previous: str | None
) -> None:
    """A successful swap's `--json` outcome."""
    assert done.returncode == 0, done.stderr[-3000:]
    assert result["variant"] == variant
    assert result["previous"] == previous
    assert result["outcome"] in ("started", "swapped"), result
    assert result["timings"]["start_to_ready"] > 0


def test_swaps_baseline_ngram_draft_baseline(stack: Stack):
    done, result = stack.up("baseline")
    assert_ok(done, result, "baseline", None)
    assert result["kv_cache_tokens"] == 131_072 and not result["warnings"], result
    assert stack.serving() == "baseline"
    assert not any(k.startswith("vllm:spec_decode") for k in spec_counters(stack.url))
    stack.complete(8)

    done, result = stack.up("ngram")
    assert_ok(done, result, "ngram", "baseline")
    assert result["kv_cache_tokens"] == 131_072
    assert stack.serving() == "ngram"
    assert_speculates(stack)

    done, result = stack.up("draft")
    assert_ok(done, result, "draft", "ngram")
    assert 80_000 <= result["kv_cache_tokens"] < 131_072, result  # the draft's layer takes its share
    assert stack.serving() == "draft"
    assert_speculates(stack)
    logs = stack.run("logs", timeout=120)
    assert logs.returncode == 0, logs.stderr
    assert bootlog.boot_stage(logs.stdout) == "server ready"
    assert bootlog.kv_cache_tokens(logs.stdout) == result["kv_cache_tokens"]
    assert stack.api_key not in logs.stdout + done.stdout + done.stderr

    # the KV-size check reads the real line: expecting more than 256 MiB holds warns
    done, result = stack.up("baseline", "variants.baseline.min_kv_cache_tokens=200000")
    assert_ok(done, result, "baseline", "draft")
    assert result["kv_cache_tokens"] == 131_072
    assert any("131,072 tokens, below the expected 200,000" in w for w in result["warnings"]), result
    assert stack.serving() == "baseline"
    assert not any(k.startswith("vllm:spec_decode") for k in spec_counters(stack.url))


def ensure_serving(stack: Stack, variant: str) -> None:
    """Start `variant` unless a variant already serves (the swap test leaves baseline)."""
    status = stack.run("status", "--json", timeout=120)
    if status.returncode == 0 and json.loads(status.stdout).get("health") == "ready":
        return
    done, _ = stack.up(variant)
    assert done.returncode == 0, done.stderr[-3000:]


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
    ensure_serving(stack, "baseline")
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


def test_bench_reads_acceptance_from_the_real_counters(stack: Stack, tmp_path: Path):
    """K=1 only: real ngram drafts fewer than K tokens when its match is short, so at K=3
    `draft tokens / drafts` is below 3 and the bench's served-K check refuses the point."""
    ensure_serving(stack, "baseline")
    previous = stack.serving()
    done = stack.run(
        *("bench", "--variants", "ngram", "--k", "1", "--runs", "2", "--warmup", "1"),
        *("--max-tokens", "96", "--json", "--out", str(tmp_path)),
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads(done.stdout[done.stdout.index("{") :])
    points = {p["k"]: p for p in report["points"] if p["variant"] == "ngram"}
    assert sorted(points) == [1], report["points"]
    for k, point in points.items():
        assert point["error"] is None, point
        assert point["drafts"] > 0 and len(point["per_position"]) == k, point
        assert 0 <= point["acceptance_rate"] <= 1
        # tokens per step = 1 + accepted / drafts = 1 + rate * K when every draft has K tokens
        assert point["tokens_per_iteration"] == pytest.approx(1 + point["acceptance_rate"] * k, abs=1e-3)
        assert sum(point["per_position"]) == pytest.approx(point["acceptance_rate"] * k, abs=1e-3)
        assert point["decode_tok_s"] > 0
    assert (tmp_path / "bench.json").is_file() and (tmp_path / "bench.csv").is_file()
    assert stack.serving() == previous  # the bench restored what served before
