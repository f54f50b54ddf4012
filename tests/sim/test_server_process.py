"""The simulator as a local process over real HTTP: boot, API surface, metrics, failures."""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from composer.engine.bootlog import kv_cache_tokens

from .conftest import MODELS
from .simproc import SimProcess, metric, run_sim

# Real-time checks of the timing model: make check runs them alone, after the parallel pass.
pytestmark = pytest.mark.timing

KEY = "test-key"
TARGET = str(MODELS / "Qwen3.8-27B")
DRAFT = str(MODELS / "Qwen3.8-27B-DFlash2")
MTP7 = json.dumps({"method": "mtp", "num_speculative_tokens": 7})
ENGINE_FAILED = "RuntimeError: Engine core initialization failed. See root cause above."


def dflash(k: int = 7, backend: str | None = "flash_attn") -> str:
    config = {"method": "dflash", "model": DRAFT, "num_speculative_tokens": k}
    if backend:
        config["attention_backend"] = backend
    return json.dumps(config)


def chat(content: str, max_tokens: int = 32, **extra: object) -> dict[str, object]:
    return {
        "model": "qwen",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        **extra,
    }


@pytest.fixture(scope="module")
def mtp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    server = SimProcess.start(
        [TARGET, "--served-model-name", "qwen", "--max-model-len", "131072", "-sc", MTP7],
        api_key=KEY,
        log_dir=tmp_path_factory.mktemp("logs"),
    )
    yield server.wait_ready()
    server.stop()


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    server = SimProcess.start(
        [TARGET, "--served-model-name", "qwen", "--max-model-len", "32k", "--enable-sleep-mode"],
        env={"SIM_TIME_SCALE": "10", "VLLM_SERVER_DEV_MODE": "1"},
        log_dir=tmp_path_factory.mktemp("logs"),
    )
    yield server.wait_ready()
    server.stop()


# ---- API surface ------------------------------------------------------------------------


def test_health_needs_no_key_and_has_empty_body(mtp_server: SimProcess) -> None:
    assert mtp_server.request("GET", "/health", key="") == (200, b"")


def test_v1_requires_the_key(mtp_server: SimProcess) -> None:
    status, body = mtp_server.request("GET", "/v1/models", key="wrong")
    assert status == 401 and json.loads(body) == {"error": "Unauthorized"}
    assert mtp_server.request("GET", "/v1/models", key="")[0] == 401
    assert mtp_server.request("GET", "/metrics", key="")[0] == 200


def test_models_lists_the_served_name(mtp_server: SimProcess) -> None:
    body = mtp_server.json("GET", "/v1/models")
    assert body["object"] == "list"
    (model,) = body["data"]
    assert model["id"] == "qwen" and model["object"] == "model" and model["owned_by"] == "vllm"
    assert model["root"] == TARGET and model["parent"] is None
    assert model["max_model_len"] == 131072


def test_boot_log_lines(mtp_server: SimProcess) -> None:
    out = mtp_server.output()
    for needle in (
        "Loading weights took",
        "Model loading took",
        "init engine (profile, create kv cache, warmup model) took",
        "Maximum concurrency for 131,072 tokens per request",
        f"Starting vLLM server on http://127.0.0.1:{mtp_server.port}",
        "Application startup complete.",
    ):
        assert needle in out
    tokens = int(re.search(r"GPU KV cache size: (\d{1,3}(?:,\d{3})+) tokens", out).group(1).replace(",", ""))
    assert tokens == pytest.approx(389_000, rel=0.01)  # 7.0 GiB at the default utilisation
    assert kv_cache_tokens(out) == tokens  # the tool's own boot-log parser reads it
    assert KEY not in out


def test_streaming_chat_with_usage(mtp_server: SimProcess) -> None:
    events, _, headers = mtp_server.stream(
        "/v1/chat/completions",
        chat(
            "stream me",
            20,
            stream_options={"include_usage": True},
            chat_template_kwargs={"enable_thinking": False},
        ),
    )
    assert headers["transfer-encoding"] == "chunked"
    assert headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 20
    assert usage_chunk["usage"]["total_tokens"] == 20 + usage_chunk["usage"]["prompt_tokens"]
    content = [e for e in events[:-2] if e["choices"][0]["delta"].get("content")]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[-3]["choices"][0]["finish_reason"] == "length"
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])
    # Speculation delivers several tokens per chunk.
    assert len(content) < 20


def test_non_streaming_completion(mtp_server: SimProcess) -> None:
    body = mtp_server.json(
        "POST",
        "/v1/completions",
        {"model": "qwen", "prompt": "a" * 400, "max_tokens": 9, "temperature": 0, "ignore_eos": True},
    )
    assert body["object"] == "text_completion"
    assert body["usage"] == {"prompt_tokens": 100, "completion_tokens": 9, "total_tokens": 109}
    assert len(body["choices"][0]["text"].split()) == 9


def test_unknown_model_and_too_long_request(mtp_server: SimProcess) -> None:
    status, _ = mtp_server.request("POST", "/v1/chat/completions", {**chat("x"), "model": "nope"})
    assert status == 404
    status, body = mtp_server.request("POST", "/v1/chat/completions", chat("x", 200_000))
    assert status == 400 and b"maximum context length is 131072" in body


def test_greedy_output_is_deterministic(mtp_server: SimProcess, plain_server: SimProcess) -> None:
    def text(server: SimProcess, prompt: str) -> str:
        return server.json("POST", "/v1/chat/completions", chat(prompt, 24))["choices"][0]["message"][
            "content"
        ]

    first = text(mtp_server, "determinism")
    assert text(mtp_server, "determinism") == first
    assert text(plain_server, "determinism") == first
    assert text(mtp_server, "something else") != first


def test_metrics_identities(mtp_server: SimProcess) -> None:
    before = mtp_server.metrics()
    sizes = [1, 2, 5, 8, 33, 100]
    for i, n in enumerate(sizes):
        mtp_server.json("POST", "/v1/chat/completions", chat(f"metrics {i}", n))
    after = mtp_server.metrics()

    def delta(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    generated = delta("vllm:generation_tokens_total")
    accepted = delta("vllm:spec_decode_num_accepted_tokens_total")
    drafts = delta("vllm:spec_decode_num_drafts_total")
    drafted = delta("vllm:spec_decode_num_draft_tokens_total")
    assert generated == sum(sizes)
    assert generated == len(sizes) + accepted + drafts
    assert drafted == 7 * drafts and accepted <= drafted
    per_pos = [delta("vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(p)) for p in range(7)]
    assert per_pos == sorted(per_pos, reverse=True) and sum(per_pos) == accepted
    assert delta("vllm:time_to_first_token_seconds_count") == len(sizes)
    assert delta("vllm:e2e_request_latency_seconds_count") == len(sizes)
    assert delta("vllm:prompt_tokens_total") > 0
    assert 'model_name="qwen"' in next(iter(after)) and 'engine="0"' in next(iter(after))


def test_no_spec_metrics_without_speculation(plain_server: SimProcess) -> None:
    assert not any("spec_decode" in name for name in plain_server.metrics())


def test_stream_timing_follows_the_model(plain_server: SimProcess) -> None:
    """SIM_TIME_SCALE=10: plain decode at ~294 tok/s of wall clock."""
    events, times, _ = plain_server.stream(
        "/v1/completions",
        {"model": "qwen", "prompt": "timing", "max_tokens": 120, "temperature": 0, "ignore_eos": True},
    )
    content_times = [
        t
        for e, t in zip(events, times, strict=True)
        if e != "[DONE]" and e["choices"] and e["choices"][0]["text"]
    ]
    rate = (len(content_times) - 1) / (content_times[-1] - content_times[0])
    assert rate == pytest.approx(294, rel=0.15)


def test_sleep_routes(plain_server: SimProcess, mtp_server: SimProcess) -> None:
    assert plain_server.json("GET", "/is_sleeping") == {"is_sleeping": False}
    assert plain_server.request("POST", "/sleep?level=1")[0] == 200
    assert plain_server.json("GET", "/is_sleeping") == {"is_sleeping": True}
    asleep = plain_server.metrics()
    assert metric(asleep, "vllm:engine_sleep_state", sleep_state="weights_offloaded") == 1.0
    assert plain_server.request("POST", "/wake_up")[0] == 200
    assert plain_server.json("GET", "/is_sleeping") == {"is_sleeping": False}
    assert metric(plain_server.metrics(), "vllm:engine_sleep_state", sleep_state="awake") == 1.0
    # Without --enable-sleep-mode and VLLM_SERVER_DEV_MODE the routes do not exist.
    assert mtp_server.request("POST", "/sleep?level=1")[0] == 404
    # Like vLLM, the sleep-state gauge is always exported (awake = 1 without sleep mode).
    assert metric(mtp_server.metrics(), "vllm:engine_sleep_state", sleep_state="awake") == 1.0


# ---- process lifecycle ------------------------------------------------------------------


def test_port_closed_while_loading_then_sigterm_exits_zero(tmp_path: Path) -> None:
    server = SimProcess.start([TARGET], env={"SIM_LOAD_SECONDS": "1.5"}, log_dir=tmp_path)
    try:
        time.sleep(0.5)
        assert server.proc.poll() is None and not server.listening()
        server.wait_ready()
        server.proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert server.proc.wait(timeout=2) == 0
        assert time.monotonic() - started < 1.0
    finally:
        server.stop()


def test_hang_never_listens(tmp_path: Path) -> None:
    server = SimProcess.start([TARGET], env={"SIM_FAIL": "hang", "SIM_LOAD_SECONDS": "0"}, log_dir=tmp_path)
    try:
        deadline = time.monotonic() + 10  # the log line comes first (slow under load)
        while "Starting to load model" not in server.output() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "Starting to load model" in server.output()
        time.sleep(0.5)
        assert server.proc.poll() is None and not server.listening()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=1.5) == 0
    finally:
        server.stop()


def test_crash_after_ready(tmp_path: Path) -> None:
    server = SimProcess.start([TARGET], env={"SIM_FAIL": "crash-after:0.5"}, log_dir=tmp_path)
    try:
        server.wait_ready()
        assert server.proc.wait(timeout=5) != 0
        assert "EngineDeadError" in server.output()
    finally:
        server.stop()


# ---- argument and configuration errors --------------------------------------------------


def test_unknown_flag_is_a_usage_error() -> None:
    result = run_sim([TARGET, "--foo"])
    assert result.returncode == 2
    assert "vllm: error: unrecognized arguments: --foo" in result.stdout  # as real vLLM words it
    assert "usage: vllm [-h] [-v]" in result.stdout
    assert "vllm serve: error" not in result.stdout


def test_abbreviated_and_underscore_flags_are_accepted() -> None:
    result = run_sim(
        [TARGET, "--kv-cache-memory", "1G", "--max_model_len", "1024"], env={"SIM_FAIL": "crash"}
    )
    assert "kv_cache_memory_bytes': 1073741824" in result.stdout
    assert "'max_model_len': 1024" in result.stdout


@pytest.mark.parametrize(
    ("config", "needles"),
    [
        (
            {"method": "foo", "num_speculative_tokens": 3},
            [
                "1 validation error for SpeculativeConfig",
                "Input should be 'ngram', 'draft_model'",
                "[type=literal_error, input_value='foo', input_type=str]",
            ],
        ),
        ({"method": "dflash", "model": DRAFT, "num_speculative_tokens": 7}, ["input_value='dflash'"]),
        (
            {"method": "mtp", "num_speculative_tokens": 0},
            ["Input should be greater than 0", "type=greater_than"],
        ),
        (
            {"method": "mtp", "num_speculative_tokens": 2, "tensor_parallel_size": 2},
            [
                "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
                "  Value error, 'tensor_parallel_size' is not a valid argument in the speculative_config. "
                "Please pass 'draft_tensor_parallel_size' instead. [type=value_error, ",
                "input_type=ArgsKwargs]",
            ],
        ),
    ],
)
def test_invalid_speculative_config(config: dict[str, object], needles: list[str]) -> None:
    result = run_sim([TARGET, "-sc", json.dumps(config)])
    assert result.returncode == 1
    for needle in needles:
        assert needle in result.stdout
    assert "Starting vLLM server" not in result.stdout


def test_mtp_k_must_be_divisible_by_depth(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"text_config": {"mtp_num_hidden_layers": 2}}))
    result = run_sim([str(model), "-sc", json.dumps({"method": "mtp", "num_speculative_tokens": 3})])
    assert result.returncode == 1
    assert "must be divisible by n_predict=2" in result.stdout


# ---- failure injection ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        ([], {"SIM_FAIL": "crash"}, "CUDA error"),
        ([], {"SIM_FAIL": "cuda-oom"}, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"),
        (
            [],
            {"SIM_FAIL": "no-kv-memory"},
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
        ),
        (
            ["--attention-backend", "flash_attn"],
            {"VLLM_FLASH_ATTN_VERSION": "3", "SIM_GPU_CAPABILITY": "8.9"},
            "Cannot use FA version 3",
        ),
        (
            ["-tp", "2"],
            {"SIM_MIN_SHM_BYTES": "1T"},
            "Error while creating shared memory segment /dev/shm/nccl-",
        ),
        (
            ["--kv-cache-memory-bytes", "1G", "--max-model-len", "131072"],
            {},
            "To serve at least one request with the model's max seq len (131072)",
        ),
    ],
)
def test_failure_modes(args: list[str], env: dict[str, str], needle: str) -> None:
    result = run_sim([TARGET, *args], env={**env, "SIM_LOAD_SECONDS": "0"})
    assert result.returncode != 0
    assert needle in result.stdout
    assert ENGINE_FAILED in result.stdout
    assert "Starting vLLM server" not in result.stdout


def test_nccl_failure_names_the_nccl_error() -> None:
    result = run_sim([TARGET, "-tp", "4"], env={"SIM_MIN_SHM_BYTES": "1T"})
    assert "ncclSystemError" in result.stdout and result.returncode != 0


def test_fa3_on_hopper_and_tp_with_enough_shm_boot(tmp_path: Path) -> None:
    server = SimProcess.start(
        [TARGET, "-tp", "2", "--attention-backend", "FLASH_ATTN", "--max-model-len", "8192"],
        env={"VLLM_FLASH_ATTN_VERSION": "3", "SIM_GPU_CAPABILITY": "9.0", "SIM_MIN_SHM_BYTES": "0"},
        log_dir=tmp_path,
    )
    try:
        server.wait_ready()
    finally:
        server.stop()


# ---- the dflash overlay -----------------------------------------------------------------


def dflash_args(k: int = 7, backend: str | None = "flash_attn") -> list[str]:
    return [TARGET, "--kv-cache-memory-bytes", "4.5G", "--max-model-len", "131072", "-sc", dflash(k, backend)]


def test_dflash_needs_non_causal_backend(dflash_src: Path) -> None:
    result = run_sim(dflash_args(backend=None), src=dflash_src)
    assert result.returncode == 1
    assert "does not have non-causal support, which is required for DFlash." in result.stdout


def test_dflash_on_wsl_needs_pinned_memory(dflash_src: Path) -> None:
    result = run_sim(dflash_args(), env={"SIM_WSL": "1"}, src=dflash_src)
    assert result.returncode != 0
    assert "Using 'pin_memory=False' as WSL is detected" in result.stdout
    assert "UVA is not available" in result.stdout


def test_dflash_serves_with_the_overlay(dflash_src: Path, tmp_path: Path) -> None:
    server = SimProcess.start(
        dflash_args(),
        env={"SIM_WSL": "1", "VLLM_WSL2_ENABLE_PIN_MEMORY": "1"},
        src=dflash_src,
        log_dir=tmp_path,
    )
    try:
        server.wait_ready()
        out = server.output()
        assert "block_size=8" in out
        assert re.search(r"KV cache size: 249,99\d tokens", out)
        before = server.metrics()
        server.json(
            "POST",
            "/v1/completions",
            {"prompt": "dflash", "max_tokens": 200, "temperature": 0, "ignore_eos": True},
        )
        after = server.metrics()
        accepted = metric(after, "vllm:spec_decode_num_accepted_tokens_total") - metric(
            before, "vllm:spec_decode_num_accepted_tokens_total"
        )
        drafts = metric(after, "vllm:spec_decode_num_drafts_total") - metric(
            before, "vllm:spec_decode_num_drafts_total"
        )
        assert 1 + accepted / drafts == pytest.approx(3.92, rel=0.08)
    finally:
        server.stop()


def test_keep_alive_survives_rejected_posts(mtp_server: SimProcess) -> None:
    """A 401 answer must not leave the request body in the connection."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", mtp_server.port, timeout=10)
    try:
        body = json.dumps(chat("keep alive", 3))
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=body,
            headers={"content-type": "application/json", "authorization": "Bearer x"},
        )
        first = conn.getresponse()
        assert first.status == 401
        first.read()
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=body,
            headers={"content-type": "application/json", "authorization": f"Bearer {KEY}"},
        )
        second = conn.getresponse()
        assert second.status == 200
        assert json.loads(second.read())["usage"]["completion_tokens"] == 3
    finally:
        conn.close()
