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


def _dechunk(raw: bytes) -> bytes:
    """The body of a chunked HTTP/1.1 response (`raw`: from its head's end)."""
    body, at = [], 0
    while True:
        line_end = raw.index(b"\r\n", at)
        size = int(raw[at:line_end], 16)
        if size == 0:
            return b"".join(body)
        body.append(raw[line_end + 2 : line_end + 2 + size])
        at = line_end + 2 + size + 2


@pytest.mark.parametrize("continue_streams", [True, False])
def test_a_stream_to_a_client_that_stops_reading_arrives_whole_and_in_order(
    make_gateway, continue_streams: bool
) -> None:
    """A stream's bytes go out from where they arrive while the client reads; once its
    connection's buffers are full they wait in the gateway (and upstream), then go on in
    their order with the bytes that came meanwhile."""
    gw = make_gateway(continue_streams=continue_streams)
    chunks, tag = 3000, "x" * 8192
    body = sse_request(tag, chunks=chunks)
    head = (
        f"POST {CHAT} HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {KEY}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    sock = socket.socket()
    sock.connect(("127.0.0.1", gw.port))
    try:
        sock.sendall(head + body)
        connections = gw.server.public.server_state.connections
        gw.wait(lambda _: any(c.flow.write_paused for c in list(connections)))  # the client does not read
        raw = b""
        sock.settimeout(60)
        while not raw.endswith(b"\r\n0\r\n\r\n"):
            data = sock.recv(1 << 20)
            assert data, "the connection closed before the stream's end"
            raw += data
    finally:
        sock.close()
    status, _, rest = raw.partition(b"\r\n")
    assert status == b"HTTP/1.1 200 OK"
    events = _dechunk(rest.partition(b"\r\n\r\n")[2]).split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    assert [json.loads(e[len(b"data: ") :])["i"] for e in events[:-2]] == list(range(chunks))
