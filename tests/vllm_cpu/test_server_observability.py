"""Real vLLM (CPU build) behind the gateway: the status JSON reads its real metrics, and a real
Prometheus with observability/prometheus.yml gets data for every vLLM query of the dashboard.

Runs on the tier's shared stack serving `ngram` (left so by test_server.py; `up ngram` is a
no-op then), before test_swaps.py goes on from it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.gateway.promlab import Prometheus, dashboard_queries, scrape_config, wait_until
from tests.vllm_cpu.stack import SERVED, Stack

pytestmark = [pytest.mark.docker, pytest.mark.vllm_cpu]

K = 3  # ngram's num_speculative_tokens in cpu.toml


@pytest.fixture(scope="module")
def ngram(cpu_stack: Stack) -> Iterator[Stack]:
    cpu_stack.ensure_serving("ngram")
    yield cpu_stack


def test_the_status_reads_real_vllm_metrics(ngram: Stack) -> None:
    url = f"{ngram.url}/gateway/status"
    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.get(url, headers=ngram.headers, timeout=10).status_code == 200  # sampling starts
    deadline = time.monotonic() + 60
    while True:
        ngram.complete(32)
        status = httpx.get(url, headers=ngram.headers, timeout=10).json()
        found = status["variants"].get("ngram", {})
        if found.get("tokens_per_s") and found.get("acceptance") is not None:
            break
        assert time.monotonic() < deadline, status
        time.sleep(0.5)
    assert status["serving"] == ["ngram"] and status["served_name"] == SERVED
    assert 0 <= found["acceptance"] <= 1 and 1 <= found["mean_accepted_length"] <= 1 + K
    assert len(found["acceptance_per_position"]) == K
    assert found["kv_cache_usage"] is not None and found["sparkline"]
    assert ngram.api_key not in str(status)


def test_prometheus_gets_data_for_every_vllm_query_of_the_dashboard(ngram: Stack, tmp_path: Path) -> None:
    port = int(ngram.url.rsplit(":", 1)[1])
    prom = Prometheus(scrape_config(port), tmp_path)
    try:
        wait_until(prom, 'up{job="vllm"} == 1')
        deadline = time.monotonic() + 60
        while not prom.query(
            f'count_over_time(vllm:generation_tokens_total{{model_name="{SERVED}"}}[1m]) >= 5'
        ):
            assert time.monotonic() < deadline, "prometheus did not scrape vLLM five times"
            ngram.complete(16)
        ngram.complete(16)
        time.sleep(2)
        empty = [
            f"{title}: {expr}"
            for title, expr in dashboard_queries(SERVED)
            if "vllm:" in expr and not prom.query(expr)
        ]
        assert not empty, "vLLM queries without data on real vLLM:\n" + "\n".join(empty)
    finally:
        prom.stop()
