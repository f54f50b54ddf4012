"""Real vLLM (CPU build, tiny checkpoint) serving the `ngram` variant started by `compose-spec up`.

The tier's shared stack (`cpu_stack`) serves ngram for every test here: the version and
model list are the real ones, a completion moves the real spec-decode counters, and the
boot log carries the stages vLLM really prints. test_swaps.py goes on from ngram.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.vllm_cpu.conftest import VLLM_VERSION
from tests.vllm_cpu.stack import SERVED, Stack, spec_counters

pytestmark = [pytest.mark.docker, pytest.mark.vllm_cpu]

K = 3


@dataclass
class Server:
    """The shared stack serving ngram, and how `up ngram` went."""

    stack: Stack
    boot_seconds: float
    up: subprocess.CompletedProcess[str] = field(repr=False)

    @property
    def url(self) -> str:
        return self.stack.url

    @property
    def api_key(self) -> str:
        return self.stack.api_key

    @property
    def headers(self) -> dict[str, str]:
        return self.stack.headers

    def compose_spec(self, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.stack.run(*extra, timeout=timeout)


@pytest.fixture(scope="module")
def ngram_server(cpu_stack: Stack) -> Iterator[Server]:
    """`compose-spec up ngram` on .env.cpu + cpu.toml (left serving for test_swaps.py)."""
    started = time.monotonic()
    up = cpu_stack.run("up", "ngram")
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    yield Server(cpu_stack, time.monotonic() - started, up)


def test_version_and_models_are_the_real_servers(ngram_server):
    assert httpx.get(f"{ngram_server.url}/version", timeout=10).json() == {"version": VLLM_VERSION}
    models = httpx.get(f"{ngram_server.url}/v1/models", headers=ngram_server.headers, timeout=10).json()
    assert [m["id"] for m in models["data"]] == [SERVED]
    assert models["data"][0]["root"] == "/models/qwen3-tiny"
    assert models["data"][0]["max_model_len"] == 2048
    wrong = httpx.get(f"{ngram_server.url}/v1/models", headers={"Authorization": "Bearer wrong"}, timeout=10)
    assert wrong.status_code == 401


def test_completion_moves_the_spec_decode_counters(ngram_server):
    before = spec_counters(ngram_server.url)
    assert (
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{SERVED}",position="{K - 1}"}}'
        in before
    )
    body = {
        "model": SERVED,
        "prompt": "hello world the model",
        "max_tokens": 128,
        "temperature": 0,
        "ignore_eos": True,
    }
    done = httpx.post(
        f"{ngram_server.url}/v1/completions", json=body, headers=ngram_server.headers, timeout=120
    )
    assert done.status_code == 200, done.text
    assert done.json()["usage"]["completion_tokens"] == 128
    after = spec_counters(ngram_server.url)
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    drafts = delta["vllm:spec_decode_num_drafts_total"]
    proposed = delta["vllm:spec_decode_num_draft_tokens_total"]
    accepted = delta["vllm:spec_decode_num_accepted_tokens_total"]
    assert delta["vllm:generation_tokens_total"] == 128
    assert drafts > 0 and 0 < proposed <= K * drafts
    assert 0 < accepted <= proposed
    per_position = sum(v for k, v in delta.items() if "per_pos" in k)
    assert per_position == accepted


def test_status_and_boot_log(ngram_server):
    status = ngram_server.compose_spec("status", "--json")
    assert status.returncode == 0, status.stderr
    assert '"variant": "ngram"' in status.stdout and '"health": "ready"' in status.stdout
    logs = ngram_server.compose_spec("logs")
    assert logs.returncode == 0, logs.stderr
    for line in (
        "Starting vLLM server on http://",
        "Application startup complete.",
        "Loading weights took",
        "CPU KV cache size: 131,072 tokens",
        "Async scheduling not supported with ngram-based speculative decoding",
    ):
        assert line in logs.stdout, line
    assert ngram_server.api_key not in logs.stdout + status.stdout + ngram_server.up.stdout
