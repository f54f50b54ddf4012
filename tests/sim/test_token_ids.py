"""The simulator's token ids: return_token_ids, token-id prompts, request_id, and greedy output
that is a function of the token context (a request continued from prompt + emitted ids goes on
token for token, on the same variant or another of the same model)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import MODELS
from .simproc import SimProcess

TARGET = str(MODELS / "Qwen3.8-27B")
MTP7 = json.dumps({"method": "mtp", "num_speculative_tokens": 7})
FAST = {"SIM_TIME_SCALE": "200", "SIM_LOAD_SECONDS": "0.1"}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimProcess, SimProcess]]:
    """A plain and an MTP server of the same model (both greedy-exact, no flips)."""
    logs = tmp_path_factory.mktemp("logs")
    common = [TARGET, "--served-model-name", "qwen", "--max-model-len", "8192"]
    plain = SimProcess.start(common, env=FAST, log_dir=logs)
    mtp = SimProcess.start([*common, "-sc", MTP7], env=FAST, log_dir=logs)
    try:
        yield plain.wait_ready(), mtp.wait_ready()
    finally:
        plain.stop()
        mtp.stop()


def _greedy(prompt: str | list[int] | None, max_tokens: int, **fields: Any) -> dict[str, Any]:
    """A temperature-0 request to the simulator's model (a chat request when `prompt` is None)."""
    return {
        "model": "qwen",
        **({} if prompt is None else {"prompt": prompt}),
        "max_tokens": max_tokens,
        "temperature": 0,
        **fields,
    }


def _streamed(server: SimProcess, path: str, body: dict[str, Any]) -> tuple[list[Any], list[int], str]:
    """Events, the emitted ids and the text of one streamed request."""
    events, _, _ = server.stream(path, body)
    chunks = [e for e in events if e != "[DONE]" and e.get("choices")]
    ids = [i for c in chunks for i in c["choices"][0].get("token_ids") or []]
    text = "".join(
        (c["choices"][0].get("delta") or {}).get("content") or c["choices"][0].get("text") or ""
        for c in chunks
    )
    return events, ids, text


def test_a_continued_completion_goes_on_token_for_token_on_another_variant(servers) -> None:
    plain, mtp = servers
    body = _greedy("Explain speculative decoding.", 200, ignore_eos=True)
    events, ids, text = _streamed(plain, "/v1/completions", {**body, "return_token_ids": True})
    prompt_ids = events[0]["choices"][0]["prompt_token_ids"]
    assert len(ids) == 200 and len(prompt_ids) == len("Explain speculative decoding.") // 4 + 1

    cont = {**body, "prompt": prompt_ids + ids[:50], "max_tokens": 150, "return_token_ids": True}
    _, rest_ids, rest_text = _streamed(mtp, "/v1/completions", cont)
    assert rest_ids == ids[50:]
    first_text = "".join(
        plain.json("POST", "/v1/completions", {**body, "max_tokens": 50})["choices"][0]["text"]
    )
    assert first_text + rest_text == text


def test_a_chat_stream_continues_from_its_templated_prompt_ids(servers) -> None:
    plain, mtp = servers
    messages = [{"role": "user", "content": "Tell me about GPUs."}]
    body = _greedy(None, 120, messages=messages, ignore_eos=True, return_token_ids=True)
    events, ids, text = _streamed(plain, "/v1/chat/completions", body)
    prompt_ids = events[0]["prompt_token_ids"]  # chat: at the top level of the first chunk
    cont = _greedy(prompt_ids + ids[:40], 80, ignore_eos=True, return_token_ids=True)
    _, rest_ids, rest_text = _streamed(mtp, "/v1/completions", cont)
    assert rest_ids == ids[40:]
    assert text.endswith(rest_text) and len(rest_text) < len(text)


def test_a_continuation_ends_where_the_natural_end_of_sequence_is(servers) -> None:
    plain, _ = servers
    body = _greedy("short", 2000, return_token_ids=True)
    whole = plain.json("POST", "/v1/completions", body)
    ids = whole["choices"][0]["token_ids"]
    assert whole["choices"][0]["finish_reason"] == "stop"
    prompt_ids = whole["choices"][0]["prompt_token_ids"]
    rest = plain.json("POST", "/v1/completions", {**body, "prompt": prompt_ids + ids[:10]})
    assert rest["choices"][0]["token_ids"] == ids[10:]
    assert rest["choices"][0]["finish_reason"] == "stop"
    assert rest["usage"]["prompt_tokens"] == len(prompt_ids) + 10


def test_token_ids_only_reach_a_client_that_asked(servers) -> None:
    plain, _ = servers
    body = _greedy("hello there", 8)
    events, _, _ = plain.stream("/v1/completions", body)
    raw = json.dumps(events)
    assert "token_ids" not in raw
    assert "token_ids" not in json.dumps(plain.json("POST", "/v1/completions", body))


def test_a_request_id_names_the_response(servers) -> None:
    plain, _ = servers
    body = {"model": "qwen", "prompt": "hi", "max_tokens": 4, "request_id": "abc123"}
    assert plain.json("POST", "/v1/completions", body)["id"] == "cmpl-abc123"
    status, raw = plain.request("POST", "/v1/completions", {**body, "request_id": 7})
    assert status == 400 and b"request_id" in raw
