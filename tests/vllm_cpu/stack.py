"""One compose-spec stack on .env.cpu + cpu.toml, shared by the real-vLLM tests.

A boot of real vLLM takes about a minute on 2 cores, so the whole tier shares one stack
(its own project and port, the gateway in front): each test starts the variant it needs
with `up`, which is a no-op when that variant already serves with the same configuration.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.conftest import REPO, isolated_env

SERVED = "claude-opus-5"
PREFIX = "hcpu"
"""What the names of everything the tier creates start with."""

FAILING = """
[variants.badflag]
description = "a flag vLLM's argument parser rejects"
extends = "baseline"
extra_args = ["--enforce-eager", "--dtype", "float32", "--no-such-flag"]

[variants.hd16]
description = "the tiny Qwen3 with head_dim 16 (set stack.model_dir to it): no CPU attention kernel"
extends = "baseline"
"""
"""Variants that fail on real vLLM, layered over cpu.toml (they are never started by default)."""


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
        """`compose-spec ARGS...` on this stack."""
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

    def ensure_serving(self, variant: str) -> subprocess.CompletedProcess[str]:
        """`up VARIANT` unless it already serves (then `up` is a no-op, answered in seconds)."""
        done, _ = self.up(variant)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done

    def complete(self, tokens: int) -> dict:
        """A greedy completion of `tokens` tokens through the gateway."""
        body = {"model": SERVED, "prompt": "hello world the model", "max_tokens": tokens}
        body |= {"temperature": 0, "ignore_eos": True}
        done = httpx.post(f"{self.url}/v1/completions", json=body, headers=self.headers, timeout=180)
        assert done.status_code == 200, done.text
        assert done.json()["usage"]["completion_tokens"] == tokens
        return done.json()


def make_stack(port: int, state: Path) -> Stack:
    """A stack on .env.cpu + cpu.toml + the failing variants, in a fresh project; nothing started."""
    project = f"{PREFIX}-{uuid.uuid4().hex[:8]}"
    failing = state / "failing.toml"
    failing.write_text(FAILING)
    env = isolated_env(state, key_bytes=32)
    args = [sys.executable, "-m", "composer", "--env-file", str(REPO / ".env.cpu")]
    args += ["--stack", "composer.toml", "--stack", "images/vllm-cpu/cpu.toml", "--stack", str(failing)]
    args += [
        "--set",
        f"stack.project={project}",
        "--set",
        f"stack.port={port}",
        "--set",
        "stack.probation=0s",
    ]
    return Stack(project, f"http://127.0.0.1:{port}", env["VLLM_API_KEY"], env, args)


def spec_counters(url: str) -> dict[str, float]:
    """Spec-decode and generation counters (`*_total` samples only), summed over labels."""
    totals: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(("vllm:spec_decode", "vllm:generation_tokens_total")):
            name, value = line.rsplit(" ", 1)
            if name.split("{")[0].endswith("_total"):
                key = name if "per_pos" in name else name.split("{")[0]
                totals[key] = totals.get(key, 0.0) + float(value)
    return totals


def assert_speculates(stack: Stack, k: int, tokens: int = 64) -> dict[str, float]:
    """A completion moves the real spec-decode counters (read through the gateway); the delta."""
    before = spec_counters(stack.url)
    stack.complete(tokens)
    after = spec_counters(stack.url)
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    drafts = delta["vllm:spec_decode_num_drafts_total"]
    proposed = delta["vllm:spec_decode_num_draft_tokens_total"]
    accepted = delta["vllm:spec_decode_num_accepted_tokens_total"]
    assert delta["vllm:generation_tokens_total"] == tokens
    assert drafts > 0 and 0 < proposed <= k * drafts
    assert 0 <= accepted <= proposed
    assert sum(v for key, v in delta.items() if "per_pos" in key) == accepted
    return delta
