"""Batching over real HTTP: the MTP crossover under concurrency, and prefill blocking decode."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from vllm.sim import batching
from vllm.sim.profiles import get_profile

from .conftest import MODELS
from .simproc import SimProcess, metric

# Real-time checks of the timing model: make check runs them alone, after the parallel pass.
pytestmark = pytest.mark.timing

TARGET = str(MODELS / "Qwen3.8-27B")
MTP7 = json.dumps({"method": "mtp", "num_speculative_tokens": 7})
SCALE = 5.0
TOKENS = 120


def start(tmp_path: Path, *extra: str) -> SimProcess:
    server = SimProcess.start(
        [TARGET, "--served-model-name", "q", "--max-model-len", "32768", *extra],
        env={"SIM_TIME_SCALE": str(SCALE)},
        log_dir=tmp_path,
    )
    return server.wait_ready()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SimProcess]]:
    logs = tmp_path_factory.mktemp("logs")
    started = {"baseline": start(logs), "mtp": start(logs, "-sc", MTP7)}
    yield started
    for server in started.values():
        server.stop()


def aggregate(server: SimProcess, streams: int) -> float:
    """Generated tokens per simulated second with ``streams`` concurrent requests."""
    errors: list[object] = []

    def one(i: int) -> None:
        body = {"prompt": f"stream {i}", "max_tokens": TOKENS, "ignore_eos": True, "temperature": 0}
        status, raw = server.request("POST", "/v1/completions", body)
        if status != 200 or json.loads(raw)["usage"]["completion_tokens"] != TOKENS:
            errors.append((status, raw))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    wall = time.monotonic() - started
    assert not errors
    return streams * TOKENS / (wall * SCALE)


def test_mtp_pays_at_4_streams_and_loses_at_16(servers: dict[str, SimProcess]) -> None:
    profile = get_profile()
    measured = {
        (name, streams): aggregate(servers[name], streams)
        for name in ("baseline", "mtp")
        for streams in (4, 16)
    }
    assert measured[("mtp", 4)] > 1.2 * measured[("baseline", 4)]
    assert measured[("mtp", 16)] < 0.9 * measured[("baseline", 16)]
    # The served rates follow the model (prefill and HTTP overhead make them a bit lower).
    for (name, streams), rate in measured.items():
        method, k = ("mtp", 7) if name == "mtp" else (None, 0)
        assert rate == pytest.approx(batching.aggregate_tok_s(profile, method, k, streams), rel=0.2)


def test_concurrency_shows_in_the_gauges(tmp_path: Path) -> None:
    server = start(tmp_path, "--max-num-seqs", "2")
    try:
        threads = [
            threading.Thread(
                target=server.request,
                args=("POST", "/v1/completions", {"prompt": f"g{i}", "max_tokens": 60, "ignore_eos": True}),
            )
            for i in range(4)
        ]
        for thread in threads:
            thread.start()
        time.sleep(0.1)
        samples = server.metrics()
        assert metric(samples, "vllm:num_requests_running") == 2
        assert metric(samples, "vllm:num_requests_waiting") == 2
        assert 0 < metric(samples, "vllm:kv_cache_usage_perc") < 0.01
        for thread in threads:
            thread.join(timeout=30)
        assert metric(server.metrics(), "vllm:request_success_total", finished_reason="length") == 4
    finally:
        server.stop()


def test_a_16k_prefill_delays_the_other_streams_tokens(servers: dict[str, SimProcess]) -> None:
    """Chunked prefill of a 16k prompt shares steps with a running stream, slowing it."""
    server = servers["baseline"]
    profile = get_profile()
    prefill: dict[str, float] = {}

    def long_prompt() -> None:
        prefill["sent"] = time.monotonic()
        body = {"prompt": "word " * 12_800, "max_tokens": 1}  # 64,000 characters = 16,000 tokens
        status, raw = server.request("POST", "/v1/completions", body)
        assert status == 200 and json.loads(raw)["usage"]["prompt_tokens"] == 16_000
        prefill["done"] = time.monotonic()

    other = threading.Thread(target=long_prompt)
    _, times, _ = server.stream(
        "/v1/completions",
        {"prompt": "decoding stream", "max_tokens": 200, "ignore_eos": True},
        on_event=lambda n: other.start() if n == 40 else None,
    )
    other.join(timeout=30)
    gaps = [b - a for a, b in pairwise(times)]
    normal = sorted(gaps)[len(gaps) // 2]
    assert normal == pytest.approx(1 / 29.4 / SCALE, rel=0.5)
    slow = batching.step_seconds(profile, None, 0, 1, 2047) / SCALE
    # The prefill as the stream saw it: its steps that took at least half a prefill chunk's
    # step, within the other request's round trip. Counted as steps, not as the tokens between
    # the first and the last of them: a stall of the loaded test machine near the round trip
    # would stretch that span over normal-pace tokens.
    prefill_steps = [
        gap
        for i, gap in enumerate(gaps)
        if gap > slow / 2 and prefill["sent"] < times[i + 1] and times[i] < prefill["done"]
    ]
    # About 16,000 / 2,047 = 8 prefill chunks, each a slow step that still carries one token.
    assert 5 <= len(prefill_steps) <= 12, gaps
    # Their typical length, not the longest: a busy machine's stall lengthens one step, not all.
    assert statistics.median(prefill_steps) == pytest.approx(slow, rel=0.35), prefill_steps
    assert max(gaps) > 10 * normal
