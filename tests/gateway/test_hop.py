"""The gateway's hop: what each forwarded response carries, and how its bytes go out."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import pytest

from composer.gateway.public import continuation
from composer.gateway.status.metrics import Metrics

from .conftest import KEY
from .fakes import sse_request

AUTH = {"Authorization": f"Bearer {KEY}"}
CHAT = "/v1/chat/completions"


def test_client_connections_send_without_delay(gateway) -> None:
    """An answer written in parts (head, body, end) must not wait on the client's delayed ACK:
    the gateway's accepted sockets have TCP_NODELAY (its listener is made with proto 0, so the
    event loop does not set it)."""
    registry = gateway.server.protocol.registry
    with socket.create_connection(("127.0.0.1", gateway.port)):
        deadline = time.monotonic() + 10
        while not registry.idle:
            assert time.monotonic() < deadline, "the connection was never registered"
            time.sleep(0.01)
        sock = next(iter(registry.idle)).transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_every_forwarded_response_says_who_served_it(gateway, backend) -> None:
    """x-served-by on a set of one too (a live set's member names itself: test_live): the
    upstream's host while the serving variant is unknown, then that variant's first replica."""
    r = httpx.get(gateway.url + "/v1/models", headers=AUTH, timeout=10)
    assert r.status_code == 200 and r.headers["x-served-by"] == "127.0.0.1"
    gateway.gateway.switcher.serving = "mtp"
    stream = httpx.post(gateway.url + CHAT, content=sse_request("s"), headers=AUTH, timeout=30)
    assert stream.status_code == 200 and stream.headers["x-served-by"] == "mtp/1"


def test_forwarded_responses_carry_the_gateway_s_own_time(gateway) -> None:
    """Server-Timing: gateway;dur=MS, the gateway's time without the backend's."""
    for path, body in (("/v1/models", None), (CHAT, sse_request("t"))):
        r = httpx.request(
            "POST" if body else "GET", gateway.url + path, content=body, headers=AUTH, timeout=30
        )
        assert r.status_code == 200
        name, _, dur = r.headers["server-timing"].partition(";dur=")
        assert name == "gateway" and 0 <= float(dur) < 60_000, r.headers["server-timing"]


HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m"}
FIRST = json.dumps({**HEAD, "prompt_token_ids": [1], "choices": [{"index": 0, "delta": {"content": "a"}}]})


@pytest.mark.parametrize(
    "raw",
    [
        # CRLF framing (SSE allows it): no event ever ends in "\n\n"
        f"data: {FIRST}\r\n\r\ndata: [DONE]\r\n\r\n".encode(),
        # an id field before the data
        f"id: 1\ndata: {FIRST}\n\nid: 2\ndata: [DONE]\n\n".encode(),
        # the backend's own error, ending the stream without [DONE]
        b'data: {"error": {"message": "boom", "code": 500}}\n\n',
    ],
)
def test_a_stream_framed_otherwise_reaches_the_client_whole_and_is_never_sent_again(raw: bytes) -> None:
    """With continue_streams on, such a stream was held back (CRLF) or, ending without a
    [DONE] the record could read, sent upstream again as if nothing had reached the client:
    the client got it twice, or never its end."""
    stream = continuation.Stream(True, {"messages": [], "stream": True}, Metrics())
    out = b"".join(stream.feed(raw[i : i + 7]) for i in range(0, len(raw), 7))
    assert out == raw
    assert stream._following() is None and stream.refused == "format"


def test_a_stream_whose_last_event_lacks_its_blank_line_reaches_the_client_whole() -> None:
    """An upstream without token ids whose last event ends without "\\n\\n": with
    continue_streams on the record kept those bytes back and the client's stream ended
    without them (without its [DONE]); off, they pass as they come."""
    event = json.dumps(
        {**HEAD, "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": "stop"}]}
    )
    raw = f"data: {event}\n\ndata: [DONE]\n".encode()

    async def chunks():
        for i in range(0, len(raw), 9):
            yield raw[i : i + 9]

    async def reopen(path: str, data: bytes):
        raise AssertionError("a stream that ended is not sent again")

    async def relay() -> bytes:
        stream = continuation.Stream(True, {"messages": [], "stream": True}, Metrics())
        leg = continuation.Leg(chunks(), lambda reason: None)
        return b"".join([chunk async for chunk in stream.relay(leg, reopen)])

    assert asyncio.run(relay()) == raw
