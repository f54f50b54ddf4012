"""One real vLLM server (CPU build, tiny checkpoint) started by `compose-spec up ngram`.

A single module-scoped boot (about a minute on 2 cores) serves every test here: the
version and model list are the real ones, a completion moves the real spec-decode
counters, and the boot log carries the stages vLLM really prints.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.vllm_cpu.conftest import VLLM_VERSION, port_in_range

pytestmark = [pytest.mark.docker, pytest.mark.vllm_cpu]

SERVED = "claude-opus-5"
K = 3
HOST_VARS = {"VLLM_PORT", "COMPOSE_PROJECT_NAME", "MODEL_DIR", "DRAFT_DIR", "VLLM_IMAGE", "COMPOSER_STACK"}


@dataclass
class Server:
    """A variant started by compose-spec, and the command line that started it."""

    project: str
    url: str
    api_key: str
    env: dict[str, str]
    args: list[str]
    boot_seconds: float
    up: subprocess.CompletedProcess[str] = field(repr=False)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def compose_spec(self, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.args, *extra], capture_output=True, text=True, env=self.env, cwd=REPO, timeout=timeout
        )


def remove_project(client, project: str) -> None:
    """Remove every container and network of a compose project."""
    selector = {"label": f"com.docker.compose.project={project}"}
    for container in client.containers.list(all=True, filters=selector):
        container.remove(force=True)
    for network in client.networks.list(filters=selector):
        network.remove()


@pytest.fixture(scope="module")
def ngram_server(cpu_models: Path, docker_client, tmp_path_factory) -> Iterator[Server]:
    """`compose-spec up ngram` on .env.cpu + cpu.toml, in its own project and port."""
    project = f"hcpu-{uuid.uuid4().hex[:8]}"
    port = port_in_range()
    state = tmp_path_factory.mktemp("state")
    env = {k: v for k, v in os.environ.items() if k not in HOST_VARS}
    env.update(
        VLLM_API_KEY=secrets.token_urlsafe(32),
        XDG_STATE_HOME=str(state),
        XDG_RUNTIME_DIR=str(state),
        PYTHONPATH=str(REPO),
    )
    args = [sys.executable, "-m", "composer", "--env-file", str(REPO / ".env.cpu")]
    args += ["--stack", "composer.toml", "--stack", "images/vllm-cpu/cpu.toml"]
    args += ["--set", f"stack.project={project}", "--set", f"stack.port={port}"]
    started = time.monotonic()
    up = subprocess.run(
        [*args, "up", "ngram"], capture_output=True, text=True, env=env, cwd=REPO, timeout=900
    )
    server = Server(project, f"http://127.0.0.1:{port}", env["VLLM_API_KEY"], env, args, 0.0, up)
    server.boot_seconds = time.monotonic() - started
    try:
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        yield server
    finally:
        server.compose_spec("down")
        remove_project(docker_client, project)


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
