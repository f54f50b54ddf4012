"""SSE parsing and stream timing, without a server."""

from __future__ import annotations

import json

import pytest

from composer.bench.client import ChatRequest, StreamTimer, chunk_text, parse_chunk, sse_data
from composer.errors import BenchError


def event(content: str | None = None, usage: dict | None = None) -> dict:
    body: dict = {"object": "chat.completion.chunk", "choices": []}
    if content is not None:
        body["choices"] = [{"index": 0, "delta": {"content": content}, "finish_reason": None}]
    if usage is not None:
        body["usage"] = usage
    return body


def test_sse_data_stops_at_done_and_skips_noise() -> None:
    lines = [": keep-alive", "", 'data: {"a": 1}', "event: x", 'data:{"b": 2}\r', "data: [DONE]", "data: {}"]
    assert list(sse_data(lines)) == ['{"a": 1}', '{"b": 2}']


def test_chunk_text_for_chat_and_completions() -> None:
    assert chunk_text(event("hi")) == "hi"
    assert chunk_text({"choices": [{"delta": {"role": "assistant", "content": ""}}]}) == ""
    assert chunk_text({"choices": [{"text": " there"}]}) == " there"
    assert chunk_text(event(usage={"completion_tokens": 3})) == ""


def test_error_event_and_garbage_are_errors() -> None:
    with pytest.raises(BenchError, match="mid-stream"):
        parse_chunk(json.dumps({"error": {"message": "boom"}}))
    with pytest.raises(BenchError, match="not JSON"):
        parse_chunk("{oops")


def test_timer_measures_decode_after_the_first_token() -> None:
    timer = StreamTimer(started=10.0)
    timer.feed({"choices": [{"delta": {"role": "assistant", "content": ""}}]}, 10.05)
    timer.feed(event("a"), 10.5)  # first token after 0.5 s of prefill
    timer.feed(event(" b c d"), 11.0)  # a speculative step: several tokens in one chunk
    timer.feed(event(" e"), 11.5)
    timer.feed(event(usage={"prompt_tokens": 9, "completion_tokens": 5}), 11.6)
    result = timer.result(finished=11.7)
    assert result.text == "a b c d e"
    assert result.ttft_s == pytest.approx(0.5)
    assert result.decode_s == pytest.approx(1.0)
    assert result.decode_tok_s == pytest.approx(4.0)  # 5 tokens - the first, over 1 s
    assert result.e2e_s == pytest.approx(1.7)
    assert (result.prompt_tokens, result.chunks) == (9, 3)


def test_timer_without_usage_or_text_fails() -> None:
    timer = StreamTimer(0.0)
    timer.feed(event("a"), 1.0)
    with pytest.raises(BenchError, match="usage"):
        timer.result(2.0)
    with pytest.raises(BenchError, match="without any generated text"):
        StreamTimer(0.0).result(1.0)


def test_request_body_is_greedy_streaming_without_thinking() -> None:
    body = ChatRequest(model="m", max_tokens=64).body("hello")
    assert body["temperature"] == 0
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["messages"] == [{"role": "user", "content": "hello"}]
    assert body["max_tokens"] == 64
