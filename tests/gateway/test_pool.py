"""The forwarding path's upstream client (`pool`): framing, keep-alive reuse and its limits,
on both event loops the gateway may run on (the server's is uvloop)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import pytest
import uvloop

from composer.gateway.public.pool import Pool, Response, Unreachable
from composer.gateway.routing.gate import ClientGone

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
HEADERS = [(b"content-type", b"application/json")]


@dataclass
class Seen:
    """What the scripted backend received: (connection number, request line, headers, body)."""

    requests: list[tuple[int, bytes, dict[bytes, bytes], bytes]] = field(default_factory=list)
    connections: int = 0


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, dict[bytes, bytes], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    line, *lines = head[:-4].split(b"\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(b":") for h in lines)}
    if b"content-length" in headers:
        return line, headers, await reader.readexactly(int(headers[b"content-length"]))
    body = b""
    if headers.get(b"transfer-encoding") == b"chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                break
            body += chunk[:-2]
    return line, headers, body


Answer = Callable[[asyncio.StreamWriter], Awaitable[bool]]  # writes the answer; False: close


async def _backend(answers: dict[bytes, Answer], seen: Seen) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.connections += 1
        number = seen.connections
        try:
            while True:
                line, headers, body = await _read_request(reader)
                seen.requests.append((number, line, headers, body))
                if not await answers[line.split()[1].partition(b"?")[0]](writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def _fixed(raw: bytes, keep: bool = True) -> Answer:
    async def answer(writer: asyncio.StreamWriter) -> bool:
        writer.write(raw)
        await writer.drain()
        return keep

    return answer


def _run(make_loop: Callable[[], asyncio.AbstractEventLoop], test: Callable[..., Awaitable[None]]) -> None:
    loop = make_loop()
    try:
        loop.run_until_complete(test())
    finally:
        loop.run_until_complete(_cancel_rest())  # the backend's connection handlers
        loop.close()


async def _cancel_rest() -> None:
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _body(response) -> bytes:
    data = b""
    while chunk := await response.readany():
        data += chunk
    return data


@pytest.mark.parametrize("loop", LOOPS)
def test_bodies_of_each_framing_arrive_whole_and_the_connection_is_reused(loop) -> None:
    """A content-length and a chunked body are read to their end and their connection serves the
    next request (`sent` says so); a body ended by the close is whole too, its connection not."""
    answers = {
        b"/length": _fixed(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"),
        b"/chunked": _fixed(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n"
            b"6\r\ndata: \r\n3\r\nab\n\r\n0\r\n\r\n"
        ),
        b"/close": _fixed(b"HTTP/1.1 200 OK\r\n\r\nuntil the end", keep=False),
    }

    async def test() -> None:
        seen = Seen()
        server = await _backend(answers, seen)
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        pool = Pool()
        reused: list[bool] = []
        try:
            first = await pool.request("GET", base, b"/length", [], b"", reused.append)
            assert first.status == 200 and await _body(first) == b"hello" and first.at_eof()
            second = await pool.request("POST", base, b"/chunked?x=1", HEADERS, b"{}", reused.append)
            assert second.content_type == "text/event-stream"
            assert await _body(second) == b"data: ab\n"
            third = await pool.request("GET", base, b"/close", [], b"", reused.append)
            assert await _body(third) == b"until the end"
            fourth = await pool.request("GET", base, b"/length", [], b"", reused.append)
            assert await _body(fourth) == b"hello"
        finally:
            await pool.close()
            server.close()
        assert reused == [False, True, True, False]
        assert [number for number, *_ in seen.requests] == [1, 1, 1, 2]
        _, line, headers, body = seen.requests[1]
        assert line == b"POST /chunked?x=1 HTTP/1.1" and body == b"{}"
        assert (
            headers[b"content-length"] == b"2" and headers[b"host"] == base.removeprefix("http://").encode()
        )

    _run(LOOPS[loop], test)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_broken_or_unread_body_never_leaves_its_connection_for_reuse(loop) -> None:
    """A chunked body the backend cuts off raises a payload error after the bytes that came; a
    response closed before its end drops its connection: each next request opens a new one."""
    answers = {
        b"/cut": _fixed(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n", keep=False),
        b"/big": _fixed(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n01234"),
        b"/ok": _fixed(b"HTTP/1.1 204 No Content\r\n\r\n"),
    }

    async def test() -> None:
        seen = Seen()
        server = await _backend(answers, seen)
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        pool = Pool()
        try:
            cut = await pool.request("GET", base, b"/cut", [], b"")
            assert await cut.readany() == b"abc"
            with pytest.raises(aiohttp.ClientPayloadError):
                await cut.readany()
            assert (await pool.request("GET", base, b"/ok", [], b"")).status == 204
            big = await pool.request("GET", base, b"/big", [], b"")
            assert await big.read(3) == b"012"  # the rest is left unread
            big.close()
            ok = await pool.request("GET", base, b"/ok", [], b"")
            assert ok.status == 204 and await ok.readany() == b""
        finally:
            await pool.close()
            server.close()
        assert [number for number, *_ in seen.requests] == [1, 2, 2, 3]

    _run(LOOPS[loop], test)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_streamed_body_goes_out_chunked_and_failures_are_client_errors(loop) -> None:
    """A body of unknown length is sent in chunked framing; a backend that closes before
    answering, or none listening, fails with aiohttp's connection errors."""
    answers = {
        b"/echo": _fixed(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
        b"/gone": _fixed(b"", keep=False),
    }

    async def parts() -> AsyncIterator[bytes]:
        for part in (b'{"a":', b"", b" 1}"):
            await asyncio.sleep(0)
            yield part

    async def test() -> None:
        seen = Seen()
        server = await _backend(answers, seen)
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        pool = Pool()
        try:
            echo = await pool.request("POST", base, b"/echo", HEADERS, parts())
            assert await _body(echo) == b"ok"
            with pytest.raises(aiohttp.ServerDisconnectedError):
                await pool.request("POST", base, b"/gone", HEADERS, b"{}")
        finally:
            await pool.close()
            server.close()
            await server.wait_closed()
        _, _, headers, body = seen.requests[0]
        assert headers[b"transfer-encoding"] == b"chunked" and body == b'{"a": 1}'
        with pytest.raises(Unreachable) as refused:
            await Pool().request("GET", base, b"/echo", [], b"")
        assert isinstance(refused.value, aiohttp.ClientConnectionError)

    _run(LOOPS[loop], test)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_client_body_that_breaks_off_ends_the_request_with_its_own_error(loop) -> None:
    """A streamed body whose client went away (`ClientGone`) ends the request with that error,
    not a backend's (the backend is not to blame), and its connection is not reused."""
    answers = {b"/slow": _fixed(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")}

    async def parts() -> AsyncIterator[bytes]:
        yield b'{"a":'
        await asyncio.sleep(0)
        raise ClientGone

    async def test() -> None:
        seen = Seen()
        server = await _backend(answers, seen)
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        pool = Pool()
        try:
            with pytest.raises(ClientGone):
                await pool.request("POST", base, b"/slow", HEADERS, parts())
            ok = await pool.request("POST", base, b"/slow", HEADERS, b"{}")
            assert await _body(ok) == b"ok"
        finally:
            await pool.close()
            server.close()
        assert [number for number, *_ in seen.requests] == [2]

    _run(LOOPS[loop], test)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_sink_takes_body_bytes_only_in_their_order(loop) -> None:
    """A response's sink takes each network read's bytes, in one piece, while a read waits and
    none wait before them; bytes it refuses wait for the reader, and so do those after them
    until the reader comes back for more."""

    async def test() -> None:
        response = Response(None, asyncio.get_running_loop())  # type: ignore[arg-type]
        response._head = True
        taken: list[bytes] = []
        ready = False

        def sink(data: bytes) -> bool:
            if ready:
                taken.append(data)
            return ready

        def arrive(*pieces: bytes) -> None:  # one network read (the parser's body callbacks)
            for piece in pieces:
                response._feed(piece)
            response._flush()

        response.sink = sink
        arrive(b"a")  # refused: it waits for a read
        ready = True
        arrive(b"b")  # after "a"
        assert taken == []
        assert await response.readany() == b"ab"
        arrive(b"c")  # "ab" may not have gone on yet: the reader has not come back
        assert taken == [] and await response.readany() == b"c"
        reading = asyncio.ensure_future(response.readany())
        await asyncio.sleep(0)
        arrive(b"d", b"e")
        assert taken == [b"de"] and not reading.done()
        response._done = True
        response._wake()
        assert await reading == b""

    _run(LOOPS[loop], test)
