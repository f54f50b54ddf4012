"""The gateway soak's accounting (`benchmarks/gateway_soak.py`): lost chunks, gaps against
the pacing, and what its client reads from a streamed response given in pieces."""

from __future__ import annotations

import asyncio
from array import array

import pytest

from benchmarks.gateway_soak import ClientStream, account, gap_summary

PACE = 0.010


def test_gaps_against_the_pacing() -> None:
    gaps = [0.010] * 97 + [0.0, 0.025, 0.150]
    summary = gap_summary(gaps, PACE)
    assert summary["gaps"] == 100
    assert summary["gap_p50_ms"] == 10.0
    assert summary["gap_max_ms"] == 150.0
    assert summary["gaps_over_2x"] == 2  # 25 ms and 150 ms
    assert summary["gaps_over_10x"] == 1  # 150 ms only; exactly 10x would not count
    assert gap_summary([0.100], PACE)["gaps_over_10x"] == 0


def test_no_gaps() -> None:
    assert gap_summary([], PACE) == {
        "gaps": 0,
        "gap_p50_ms": 0.0,
        "gap_p99_ms": 0.0,
        "gap_max_ms": 0.0,
        "gaps_over_2x": 0,
        "gaps_over_10x": 0,
    }


def test_lost_is_sent_minus_received_per_stream() -> None:
    sent = {"a": 100, "b": 100, "c": 40}  # c: the upstream stopped writing when it went away
    received = {"a": 100, "b": 97, "c": 40, "d": 0}  # d: never reached the upstream
    figures = account(sent, received, ended={"c", "d"}, expected=100)
    assert figures["streams"] == 4
    assert figures["chunks_sent"] == 340  # d counts as the 100 it should have had
    assert figures["chunks_received"] == 237
    assert figures["chunks_lost"] == 3 + 100
    assert figures["streams_with_loss"] == 2
    assert figures["streams_short"] == 3  # b, c, d
    assert figures["ended_early"] == 2


def chunked(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def event(i: int, source: str = "B") -> bytes:
    return b'data: {"id":"chatcmpl-%s-s1","choices":[{"index":0,"delta":{"content":" t%d"}}]}\n\n' % (
        source.encode(),
        i,
    )


class Transport:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def read(pieces: list[bytes], close: bool = True) -> tuple[ClientStream, array]:
    loop = asyncio.new_event_loop()
    try:
        gaps: array = array("d")
        stream = ClientStream(gaps, loop.create_future())
        transport = Transport()
        stream.connection_made(transport)  # type: ignore[arg-type]
        for piece in pieces:
            stream.data_received(piece)
        if close:
            stream.connection_lost(None)
        return stream, gaps
    finally:
        loop.close()


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
ROLE = b'data: {"id":"chatcmpl-B-s1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'


def test_a_whole_stream_split_anywhere() -> None:
    body = chunked(ROLE) + b"".join(chunked(event(i)) for i in range(5))
    body += chunked(b": keep-alive\n\n") + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    whole = HEAD + body
    pieces = [whole[i : i + 7] for i in range(0, len(whole), 7)]  # events cut mid-way
    stream, gaps = read(pieces)
    assert (stream.status, stream.received, stream.source) == (200, 5, "B")
    assert stream.complete and not stream.error
    assert len(gaps) == 4  # between the 5 content chunks, not the role event or the comment


def test_a_stream_cut_before_done_ended_early() -> None:
    body = chunked(ROLE) + b"".join(chunked(event(i, "A")) for i in range(3))
    stream, _ = read([HEAD + body])
    assert stream.received == 3 and stream.source == "A"
    assert not stream.complete
    assert stream.error == "closed after 3 chunks (status 200)"


@pytest.mark.parametrize("status", [b"503 Service Unavailable", b"429 Too Many Requests"])
def test_a_refusal_is_not_complete(status: bytes) -> None:
    body = b'{"error":"busy"}'
    stream, _ = read([b"HTTP/1.1 %s\r\ncontent-length: %d\r\n\r\n%s" % (status, len(body), body)])
    assert stream.received == 0 and not stream.complete and stream.error
