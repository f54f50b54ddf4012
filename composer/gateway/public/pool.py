"""The upstream client of the forwarding path: pooled keep-alive HTTP/1.1 connections.

One connection per request in flight. A connection goes back to its pool when its response
was read to its end, the request was sent whole and neither side asked to close; it is closed
after an error, a response ended by the close, a body left unread (`Response.close`) or
`KEEPALIVE_S` idle. Responses are parsed by httptools; each read returns the body bytes that
arrived since the last one, as they came (chunked framing taken off, nothing merged or split
beyond that). A response's `sink` may take the bytes of each network read instead, in one piece (while a read
waits and nothing is left unread before them), so that a stream's bytes go on without a wake-up
of the task that reads it. The request's bytes go out as given: a body in one write with its head, or a
stream in the client's chunked framing when it has no `content-length`.

Failures are aiohttp's client errors (the types the proxy and the continuation record catch):
`Unreachable` (no connection: refused, timed out), `Disconnected` (the backend closed before
its answer's head), `Incomplete` (closed, or sent what is not HTTP, within the answer).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import cast
from urllib.parse import urlsplit

import aiohttp
import httptools

# Idle upstream connections close after this long: under vLLM's own keep-alive timeout (5 s),
# so the gateway never sends on a connection the server is closing.
KEEPALIVE_S = 4.0
CONNECT_TIMEOUT_S = 5.0
# Response bytes held unread before the connection stops reading (the client is slower).
HIGH_WATER = 256 * 1024
BODYLESS_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
Origin = tuple[str, int, bytes]  # host, port, the Host header's value


class Unreachable(aiohttp.ClientConnectionError):
    """No connection to the backend could be opened (refused, unresolved, timed out)."""


class Disconnected(aiohttp.ServerDisconnectedError):
    """The backend closed the connection before the response's head."""


class Incomplete(aiohttp.ClientPayloadError):
    """The response broke off (or was not HTTP) after its head."""


class Interrupted(Exception):
    """A read was ended by `Response.interrupt`."""


class Response:
    """A response's head (`status`, `raw_headers`) and its body, read as it arrives."""

    __slots__ = (
        "_buffer",
        "_conn",
        "_done",
        "_error",
        "_head",
        "_interrupted",
        "_loop",
        "_paused",
        "_pending",
        "_queued",
        "_size",
        "_to_close",
        "_waiter",
        "raw_headers",
        "sink",
        "status",
    )

    def __init__(self, conn: _Connection, loop: asyncio.AbstractEventLoop) -> None:
        self.status = 0
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self._conn: _Connection | None = conn  # while the response is being read from it
        self._loop = loop
        self._buffer: list[bytes] = []
        self._size = 0
        self._head = False
        self._done = False
        self._to_close = False  # the body ends with the connection (no length, not chunked)
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._interrupted = False
        # takes the body bytes as they arrive (True: taken; False: they wait for a read)
        self.sink: Callable[[bytes], bool] | None = None
        self._queued = False  # bytes the sink did not take wait for a read: later ones queue too
        self._pending: list[bytes] = []  # this network read's bytes, for the sink (`_flush`)

    @property
    def content_type(self) -> str:
        for name, value in self.raw_headers:
            if name.lower() == b"content-type":
                return value.decode("latin-1")
        return ""

    @property
    def buffered(self) -> bool:
        """True when body bytes wait to be read (or the body has ended)."""
        return bool(self._buffer) or self._done

    def at_eof(self) -> bool:
        """True when the whole body was read."""
        return self._done and not self._buffer

    async def readany(self) -> bytes:
        """The body bytes that arrived since the last read (waits for some); b"" at its end.
        Raises `Incomplete` when it broke off (after the bytes that came before), `Interrupted`
        when `interrupt()` ended its wait."""
        if not self._buffer:
            self._queued = False  # what the last read returned went on: the sink may take more
        while not self._buffer:
            if self._error is not None:
                raise self._error
            if self._done:
                return b""
            await self._wait()
            if self._interrupted:
                self._interrupted = False
                raise Interrupted
        buffer = self._buffer
        data = buffer[0] if len(buffer) == 1 else b"".join(buffer)
        buffer.clear()
        self._size = 0
        if self._paused:
            self._paused = False
            if self._conn is not None and self._conn.transport is not None:
                self._conn.transport.resume_reading()
        return data

    async def read(self, limit: int) -> bytes:
        """Up to `limit` bytes of the body (fewer at its end)."""
        data = b""
        while len(data) < limit:
            chunk = await self.readany()
            if not chunk:
                break
            data += chunk
        if len(data) > limit:  # what is left stays unread: the connection cannot be reused
            self.close()
        return data[:limit]

    def interrupt(self) -> None:
        """End the read waiting now (if any) with `Interrupted`, even when bytes just came."""
        if self._waiter is not None:
            self._interrupted = True
            self._wake()

    def close(self) -> None:
        """Let the response go: its connection closes unless the body was read to its end."""
        conn = self._conn
        if conn is not None:
            self._conn = None
            conn.close()
        if not self._done and self._error is None:
            self._error = Incomplete("the response was closed before its end")
        self._wake()

    async def _wait(self) -> None:
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _feed(self, data: bytes) -> None:
        if self.sink is not None and not self._queued and not self._buffer:
            self._pending.append(data)  # offered to the sink at the end of this read
            return
        self._hold(data)

    def _flush(self) -> None:
        """Offer the sink what this network read brought, in one piece (else it waits for a read)."""
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        sink = self.sink
        if sink is not None and not self._queued and not self._buffer and sink(data):
            return
        self._hold(data)

    def _hold(self, data: bytes) -> None:
        if self.sink is not None:
            self._queued = True  # in order: later bytes go through a read too
        self._buffer.append(data)
        self._size += len(data)
        if self._size > HIGH_WATER and not self._paused and self._conn is not None:
            transport = self._conn.transport
            if transport is not None:
                self._paused = True
                transport.pause_reading()
        self._wake()

    def _fail(self, error: BaseException) -> None:
        if self._error is None and not self._done:
            self._error = error
        self._conn = None
        self._wake()


class _Connection(asyncio.Protocol):
    """One upstream connection and the httptools parser of its responses."""

    def __init__(self, pool: Pool, origin: Origin) -> None:
        self.pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: Response | None = None  # the response being read
        self.head_only = False  # the request was HEAD: the response has no body
        self.sent_whole = False  # the request's body was written to its end
        self.idle_since = 0.0
        self.closed = False
        self.writer: asyncio.Task[None] | None = None  # the task writing a streamed request body
        self._drain: asyncio.Future[None] | None = None  # set while writing is paused

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None:  # bytes nobody asked for: the connection is not usable
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except Exception as err:  # (an upgrade too: never asked for)
            response._flush()
            self._broke(Incomplete(f"the backend's response is not valid HTTP/1.1: {err!r}"))
            return
        response._flush()

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        response = self.response
        if response is not None:
            self.response = None
            if response._to_close and response._head:
                response._done = True  # the body was read to the close that ends it
                response._conn = None
                response._wake()
            elif response._head:
                response._fail(Incomplete("the backend closed the connection before the response's end"))
            else:
                response._fail(Disconnected("the backend closed the connection before answering"))
        self._resume()

    def pause_writing(self) -> None:
        if self._drain is None:
            self._drain = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._resume()

    def _resume(self) -> None:
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.response is not None:
            self.response.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        response = self.response
        if response is None:
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer: the final one follows
            response.raw_headers.clear()
            return
        response.status = status
        response._head = True
        if self.head_only:  # (httptools would wait for the body its length announces)
            self._complete(response, reuse=False)
            return
        framed = False
        for name, value in response.raw_headers:
            lowered = name.lower()
            if lowered == b"content-length" or (
                lowered == b"transfer-encoding" and b"chunked" in value.lower()
            ):
                framed = True
                break
        response._to_close = not framed
        response._wake()

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response._feed(body)

    def on_message_complete(self) -> None:
        response = self.response
        if response is not None and response._head:
            self._complete(response, reuse=self.parser.should_keep_alive())

    # internals

    def _complete(self, response: Response, reuse: bool) -> None:
        self.response = None
        response._done = True
        response._conn = None
        response._wake()
        if reuse and self.sent_whole and not response._paused:
            self.pool._release(self)
        else:
            self.close()

    def _broke(self, error: BaseException) -> None:
        response = self.response
        self.response = None
        if response is not None:
            response._fail(error)
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.pool._forget(self)
            if self.transport is not None:
                self.transport.close()
        writer = self.writer
        if writer is not None and not writer.done() and writer is not asyncio.current_task():
            writer.cancel()  # no more of the client's body for a request that ended

    async def drain(self) -> None:
        while self._drain is not None:
            if self.closed:
                return
            await asyncio.shield(self._drain)


class Pool:
    """Keep-alive connections to the backends, one per request in flight."""

    def __init__(self, keepalive: float = KEEPALIVE_S, connect_timeout: float = CONNECT_TIMEOUT_S) -> None:
        self.keepalive = keepalive
        self.connect_timeout = connect_timeout
        self._idle: dict[Origin, list[_Connection]] = {}
        self._origins: dict[str, Origin] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False

    async def request(
        self,
        method: str,
        base: str,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        data: bytes | AsyncIterator[bytes],
        sent: Callable[[bool], None] | None = None,
    ) -> Response:
        """The response head of `method target` with `headers` and `data` sent to the backend at
        `base` (its body to be read from the response). `sent(reused)` is called once the head
        is written (`reused`: on a kept-alive connection). Cancelling it closes the connection."""
        loop = asyncio.get_running_loop()
        origin = self._origins.get(base) or self._origin(base)
        conn = self._take(origin, loop.time())
        reused = conn is not None
        if conn is None:
            conn = await self._connect(origin, loop)
        response = Response(conn, loop)
        conn.response = response
        conn.head_only = method == "HEAD"
        conn.sent_whole = False
        conn.writer = None
        head = _head(method, target, origin[2], headers, data)
        transport = conn.transport
        assert transport is not None
        writer: asyncio.Task[None] | None = None
        try:
            if isinstance(data, bytes):
                transport.write(head + data if len(data) < 65536 else head)
                if len(data) >= 65536:
                    transport.write(data)
                conn.sent_whole = True
                if sent is not None:
                    sent(reused)
            else:
                transport.write(head)
                if sent is not None:
                    sent(reused)
                chunked = not any(k.lower() == b"content-length" for k, _ in headers)
                writer = conn.writer = loop.create_task(_send_body(conn, response, data, chunked))
            while not response._head:
                if response._error is not None:
                    raise response._error
                await response._wait()
        except BaseException:
            if writer is not None:
                writer.cancel()
            response.close()
            raise
        return response

    async def close(self) -> None:
        """Close every idle connection (those in use close with their responses)."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
        for conns in list(self._idle.values()):
            for conn in list(conns):
                conn.close()
        self._idle.clear()

    def _origin(self, base: str) -> Origin:
        parts = urlsplit(base)
        host = parts.hostname or "localhost"
        port = parts.port or 80
        netloc = host if port == 80 else f"{host}:{port}"
        if ":" in host:  # IPv6
            netloc = f"[{host}]" if port == 80 else f"[{host}]:{port}"
        origin = self._origins[base] = (host, port, netloc.encode("idna"))
        return origin

    def _take(self, origin: Origin, now: float) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            stale = now - conn.idle_since >= self.keepalive
            if conn.closed or stale or conn.transport is None or conn.transport.is_closing():
                conn.close()
                continue
            return conn
        return None

    async def _connect(self, origin: Origin, loop: asyncio.AbstractEventLoop) -> _Connection:
        try:
            async with asyncio.timeout(self.connect_timeout):
                transport, conn = await loop.create_connection(
                    lambda: _Connection(self, origin), origin[0], origin[1]
                )
        except TimeoutError:
            raise Unreachable(f"connecting to {origin[0]}:{origin[1]} timed out") from None
        except OSError as err:
            raise Unreachable(f"cannot connect to {origin[0]}:{origin[1]}: {err}") from err
        conn.transport = cast(asyncio.Transport, transport)  # uvloop calls connection_made later
        return conn

    def _release(self, conn: _Connection) -> None:
        if self._closed:
            conn.close()
            return
        loop = asyncio.get_running_loop()
        conn.idle_since = loop.time()
        self._idle.setdefault(conn.origin, []).append(conn)
        if self._sweep is None:
            self._sweep = loop.call_later(self.keepalive, self._expire)

    def _forget(self, conn: _Connection) -> None:
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)

    def _expire(self) -> None:
        """Close the connections idle for `keepalive` (the oldest first in each list)."""
        self._sweep = None
        now = asyncio.get_running_loop().time()
        left = False
        for idle in self._idle.values():
            while idle and now - idle[0].idle_since >= self.keepalive:
                idle.pop(0).close()
            left = left or bool(idle)
        if left:
            self._sweep = asyncio.get_running_loop().call_later(self.keepalive / 2, self._expire)


def _head(
    method: str,
    target: bytes,
    host: bytes,
    headers: list[tuple[bytes, bytes]],
    data: bytes | AsyncIterator[bytes],
) -> bytes:
    """The request's head: its line, Host, the given headers, and the body's length or framing."""
    parts = [method.encode(), b" ", target, b" HTTP/1.1\r\nhost: ", host, b"\r\n"]
    length = False
    for name, value in headers:
        if not length and name.lower() == b"content-length":
            length = True
        parts += (name, b": ", value, b"\r\n")
    if not length:
        if not isinstance(data, bytes):
            parts.append(b"transfer-encoding: chunked\r\n")
        elif data or method not in BODYLESS_METHODS:
            parts += (b"content-length: ", b"%d" % len(data), b"\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


async def _send_body(
    conn: _Connection, response: Response, data: AsyncIterator[bytes], chunked: bool
) -> None:
    """Write a streamed body (chunked framing when `chunked`); a failure to read it (the client
    went away) ends the response with that error."""
    transport = conn.transport
    assert transport is not None
    try:
        async for chunk in data:
            if conn.closed:
                return
            if chunk:
                transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
                await conn.drain()
        if chunked and not conn.closed:
            transport.write(b"0\r\n\r\n")
        conn.sent_whole = True
    except asyncio.CancelledError:
        raise
    except Exception as err:  # the client's body broke off: so does the request
        response._fail(err)
        conn.close()
    finally:
        close = getattr(data, "aclose", None)  # an async generator's: it ends its reads
        with contextlib.suppress(Exception):
            if close is not None:
                await close()
