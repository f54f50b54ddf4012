"""Sleep mode over real HTTP: routes, waiting requests, abort/wait, timings, memory, bugs, failures."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllm.sim import sleep as sleep_model

from .conftest import MODELS
from .simproc import SimProcess, metric

# Real-time checks of the timing model: make check runs them alone, after the parallel pass.
pytestmark = pytest.mark.timing

TARGET = str(MODELS / "Qwen3.8-27B")
MTP7 = json.dumps({"method": "mtp", "num_speculative_tokens": 7})
GIB = 2**30
SCALE = 20.0
SLEEP_ENV = {"SIM_TIME_SCALE": str(SCALE), "VLLM_SERVER_DEV_MODE": "1"}


def start(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> SimProcess:
    server = SimProcess.start(
        [TARGET, "--served-model-name", "q", "--max-model-len", "32768", "--enable-sleep-mode", *extra],
        env={**SLEEP_ENV, **(env or {})},
        log_dir=tmp_path,
    )
    return server.wait_ready()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SimProcess]:
    started = start(tmp_path)
    yield started
    started.stop()


def body(prompt: str, tokens: int = 30) -> dict[str, Any]:
    return {"prompt": prompt, "max_tokens": tokens, "ignore_eos": True, "temperature": 0}


def completion(server: SimProcess, prompt: str, tokens: int = 30) -> str:
    return str(server.json("POST", "/v1/completions", body(prompt, tokens))["choices"][0]["text"])


def state(server: SimProcess) -> str:
    samples = server.metrics()
    (awake,) = [
        s
        for s in ("awake", "weights_offloaded", "discard_all")
        if metric(samples, "vllm:engine_sleep_state", sleep_state=s) == 1.0
    ]
    return awake


def spec_delta(server: SimProcess, prompt: str, tokens: int) -> tuple[float, float, str]:
    """(accepted, drafts) over one request, and its text."""
    before = server.metrics()
    text = completion(server, prompt, tokens)
    after = server.metrics()

    def delta(name: str) -> float:
        return metric(after, name) - metric(before, name)

    return (
        delta("vllm:spec_decode_num_accepted_tokens_total"),
        delta("vllm:spec_decode_num_drafts_total"),
        text,
    )


def takes(measured: float, modelled: float, scale: float) -> bool:
    """A measured simulated duration matches the model: never shorter, at most 0.2 s wall longer."""
    return modelled * 0.98 <= measured <= modelled * 1.1 + 0.2 * scale


def timed(
    server: SimProcess, method: str, path: str, payload: Any = None, scale: float = SCALE
) -> tuple[int, float]:
    """Status and simulated seconds of one call."""
    started = time.monotonic()
    status, _ = server.request(method, path, payload)
    return status, (time.monotonic() - started) * scale


# ---- routes and state ------------------------------------------------------------------


def test_level_comes_from_the_query_and_health_stays_200(server: SimProcess) -> None:
    assert state(server) == "awake"
    assert server.request("POST", "/sleep?level=1", {"level": 2})[0] == 200
    assert state(server) == "weights_offloaded"  # the body's level is ignored
    assert server.json("GET", "/is_sleeping") == {"is_sleeping": True}
    assert server.request("GET", "/health") == (200, b"")
    assert server.request("POST", "/wake_up")[0] == 200
    assert server.json("GET", "/is_sleeping") == {"is_sleeping": False}
    assert state(server) == "awake"
    out = server.output()
    assert re.search(r"It took \d+\.\d{6} seconds to fall asleep\.", out)
    assert re.search(
        r"It took \d+\.\d{6} seconds to wake up tags \{'(weights|kv_cache)', '(weights|kv_cache)'\}\.", out
    )
    assert "wake up the engine with tags: None" in out


def test_bad_level_and_mode_are_rejected(server: SimProcess) -> None:
    for query in ("level=3", "level=x", "level=1&mode=later"):
        status, raw = server.request("POST", f"/sleep?{query}")
        assert status == 400, query
        assert "expected 1 or 2" in raw.decode() or "Must be one of 'abort', 'wait'" in raw.decode()
    assert server.json("GET", "/is_sleeping") == {"is_sleeping": False}


def test_wake_by_tags(server: SimProcess) -> None:
    server.request("POST", "/sleep?level=1")
    assert server.request("POST", "/wake_up?tags=weights")[0] == 200
    assert server.json("GET", "/is_sleeping") == {"is_sleeping": True}
    samples = server.metrics()
    held = metric(samples, "sim:gpu_memory_used_bytes", gpu="0")
    assert held == pytest.approx(1.3 * GIB + 13.5 * GIB, rel=0.01)
    assert server.request("POST", "/wake_up?tags=kv_cache")[0] == 200
    assert server.json("GET", "/is_sleeping") == {"is_sleeping": False}
    assert "wake up tags ['weights']" in server.output()


def test_requests_wait_while_asleep(server: SimProcess) -> None:
    reference = completion(server, "waits", 20)
    server.request("POST", "/sleep?level=1")
    result: dict[str, Any] = {}

    def ask() -> None:
        result["response"] = server.json("POST", "/v1/completions", body("waits", 20))

    asking = threading.Thread(target=ask)
    asking.start()
    time.sleep(0.5)
    assert asking.is_alive() and "response" not in result
    assert metric(server.metrics(), "vllm:num_requests_waiting") == 1
    server.request("POST", "/wake_up")
    asking.join(timeout=10)
    assert result["response"]["choices"][0]["text"] == reference
    assert result["response"]["choices"][0]["finish_reason"] == "length"


def test_abort_mode_cuts_in_flight_streams(server: SimProcess) -> None:
    before = server.metrics()
    sleeper = threading.Thread(target=server.request, args=("POST", "/sleep?level=1"))
    events, _, _ = server.stream(
        "/v1/completions", body("long", 2000), on_event=lambda n: sleeper.start() if n == 5 else None
    )
    sleeper.join(timeout=10)
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == "abort"
    generated = sum(len(e["choices"][0]["text"].split()) for e in events[:-1])
    assert 5 <= generated < 100
    after = server.metrics()
    assert (
        metric(after, "vllm:request_success_total", finished_reason="abort")
        - metric(before, "vllm:request_success_total", finished_reason="abort")
        == 1
    )


def test_wait_mode_finishes_in_flight_requests_first(server: SimProcess) -> None:
    result: dict[str, Any] = {}

    def ask() -> None:
        result["response"] = server.json("POST", "/v1/completions", body("finish me", 150))
        result["done"] = time.monotonic()

    asking = threading.Thread(target=ask)
    asking.start()
    time.sleep(0.05)
    status, _ = server.request("POST", "/sleep?level=1&mode=wait")
    asleep = time.monotonic()
    asking.join(timeout=10)
    assert status == 200
    assert result["response"]["usage"]["completion_tokens"] == 150
    assert result["response"]["choices"][0]["finish_reason"] == "length"
    assert result["done"] <= asleep
    assert server.json("GET", "/is_sleeping") == {"is_sleeping": True}


# ---- durations and memory ---------------------------------------------------------------


def config(pinned: bool, tp: int = 1) -> sleep_model.SleepConfig:
    weights = int(13.5 * GIB)
    return sleep_model.SleepConfig(
        weights_bytes=weights,
        awake_bytes=weights,
        residue_bytes=int(1.3 * GIB),
        tensor_parallel=tp,
        pinned=pinned,
        h2d_pinned=55e9,
        h2d_pageable=8.5e9,
        d2h_pinned=55e9,
        d2h_pageable=1.36e9,
        reload_bytes_per_s=2e9,
        fixed_seconds=0.2,
    )


def test_duration_formulas() -> None:
    pinned, pageable = config(True), config(False)
    assert sleep_model.wake_seconds(pinned, 1, ["weights", "kv_cache"]) == pytest.approx(
        0.2 + 13.5 * GIB / 55e9
    )
    assert sleep_model.wake_seconds(pageable, 1, ["weights"]) == pytest.approx(0.2 + 13.5 * GIB / 8.5e9)
    assert sleep_model.sleep_seconds(pageable, 1) == pytest.approx(0.2 + 13.5 * GIB / 1.36e9)
    assert sleep_model.sleep_seconds(pinned, 2) == sleep_model.wake_seconds(pinned, 2, ["weights"]) == 0.2
    assert sleep_model.wake_seconds(pinned, 1, ["kv_cache"]) == 0.2
    assert sleep_model.reload_seconds(pinned) == pytest.approx(13.5 * GIB / 2e9)


@pytest.mark.parametrize(
    ("env", "pinned"),
    [({}, True), ({"SIM_WSL": "1"}, False), ({"SIM_WSL": "1", "VLLM_WSL2_ENABLE_PIN_MEMORY": "1"}, True)],
)
def test_sleep_and_wake_take_the_modelled_time(tmp_path: Path, env: dict[str, str], pinned: bool) -> None:
    scale = 5.0  # slow enough that pinned (0.46 s) and pageable (1.9 s) wakes stay apart
    server = start(tmp_path, env={**env, "SIM_TIME_SCALE": str(scale)})
    try:
        cfg = config(pinned)
        status, slept = timed(server, "POST", "/sleep?level=1", scale=scale)
        assert status == 200
        assert takes(slept, sleep_model.sleep_seconds(cfg, 1), scale), slept
        status, woke = timed(server, "POST", "/wake_up", scale=scale)
        assert status == 200
        assert takes(woke, sleep_model.wake_seconds(cfg, 1, sleep_model.TAGS), scale), woke
        logged = float(re.findall(r"It took (\d+\.\d+) seconds to wake up", server.output())[-1])
        assert takes(woke, logged * scale, scale)
    finally:
        server.stop()


def test_memory_residue_while_asleep(tmp_path: Path) -> None:
    server = start(tmp_path, "-tp", "2", env={"SIM_MIN_SHM_BYTES": "0", "SIM_SLEEP_RESIDUE_BYTES": "1.5G"})
    try:
        awake = server.metrics()
        gpus = [metric(awake, "sim:gpu_memory_used_bytes", gpu=str(i)) for i in range(2)]
        assert gpus[0] == gpus[1] == pytest.approx(0.92 * 24 * GIB, rel=0.01)
        assert metric(awake, "sim:host_memory_used_bytes") == 0
        server.request("POST", "/sleep?level=1")
        asleep = server.metrics()
        assert metric(asleep, "sim:gpu_memory_used_bytes", gpu="1") == 1.5 * GIB
        assert metric(asleep, "sim:host_memory_used_bytes") == pytest.approx(2 * 13.5 * GIB, rel=0.001)
        freed = "Sleep mode freed 20.58 GiB memory, 1.50 GiB memory is still in use."
        assert re.search(rf"\(Worker_TP1 pid=\d+\) INFO .* {re.escape(freed)}", server.output())
        server.request("POST", "/wake_up")
        server.request("POST", "/sleep?level=2")
        discarded = server.metrics()
        assert metric(discarded, "sim:host_memory_used_bytes") == 0
        assert metric(discarded, "sim:gpu_memory_used_bytes", gpu="0") == 1.5 * GIB
    finally:
        server.stop()


def test_cold_start_in_simulated_seconds(tmp_path: Path) -> None:
    server = SimProcess.start(
        [TARGET, "--enable-sleep-mode"],
        env={**SLEEP_ENV, "SIM_TIME_SCALE": "40", "SIM_COLD_START_SECONDS": "20"},
        log_dir=tmp_path,
    )
    try:
        started = time.monotonic()
        server.wait_ready()
        assert (time.monotonic() - started) * 40 >= 20
        assert "Model loading took 13.5000 GiB and 0.500000 seconds" in server.output()
        server.request("POST", "/sleep?level=1")
        status, woke = timed(server, "POST", "/wake_up", scale=40)
        assert status == 200 and woke <= min(3.0, 20 / 5)
    finally:
        server.stop()


# ---- level 2, reload_weights and the speculative bug ------------------------------------


def test_level2_needs_reload_weights(server: SimProcess) -> None:
    reference = completion(server, "reload", 12)
    server.request("POST", "/sleep?level=2")
    assert state(server) == "discard_all"
    server.request("POST", "/wake_up")
    assert completion(server, "reload", 12) == "!" * 12
    status, raw = server.request("POST", "/collective_rpc", {"method": "reload_weights"})
    assert (status, json.loads(raw)) == (200, {"results": [None]})
    assert completion(server, "reload", 12) == reference
    assert server.request("POST", "/collective_rpc", {"method": "nope"})[0] == 500
    assert server.request("POST", "/collective_rpc", {"args": []})[0] == 400


def test_level2_with_mtp_silently_loses_acceptance(tmp_path: Path) -> None:
    server = start(tmp_path, "-sc", MTP7)
    try:
        accepted, drafts, reference = spec_delta(server, "mtp bug", 200)
        assert accepted / drafts > 3
        server.request("POST", "/sleep?level=2")
        server.request("POST", "/wake_up")
        server.request("POST", "/collective_rpc", {"method": "reload_weights"})
        started = time.monotonic()
        accepted, drafts, text = spec_delta(server, "mtp bug", 200)
        slow = (time.monotonic() - started) * SCALE
        assert text == reference  # output still correct
        assert accepted == 0 and drafts == 199  # one token per iteration
        assert slow > 2 * 200 / 59.2  # far slower than MTP's 59 tok/s
    finally:
        server.stop()


# ---- failure injection ------------------------------------------------------------------


def test_wake_failure_kills_the_engine(tmp_path: Path) -> None:
    server = start(tmp_path, env={"SIM_FAIL": "wake-fail"})
    try:
        assert server.request("POST", "/sleep?level=1")[0] == 200
        held: dict[str, Any] = {}
        waiting = threading.Thread(
            target=lambda: held.update(answer=server.request("POST", "/v1/completions", body("held")))
        )
        waiting.start()
        time.sleep(0.2)
        status, raw = server.request("POST", "/wake_up")
        assert status == 500 and b"EngineCore encountered an issue" in raw
        waiting.join(timeout=10)
        assert held["answer"][0] == 500  # the request held while asleep fails too
        assert server.request("GET", "/health")[0] == 503
        assert server.request("POST", "/v1/completions", body("dead"))[0] == 500
        out = server.output()
        assert "CUDA Error: out of memory" in out and "EngineDeadError" in out
    finally:
        server.stop()


def test_zero_acceptance_after_a_level1_wake(tmp_path: Path) -> None:
    server = start(tmp_path, "-sc", MTP7, env={"SIM_FAIL": "wake-zero-acceptance"})
    try:
        accepted, _, reference = spec_delta(server, "after wake", 100)
        assert accepted > 0
        server.request("POST", "/sleep?level=1")
        server.request("POST", "/wake_up")
        accepted, drafts, text = spec_delta(server, "after wake", 100)
        assert accepted == 0 and drafts == 99 and text == reference
        assert server.request("GET", "/health")[0] == 200
    finally:
        server.stop()
