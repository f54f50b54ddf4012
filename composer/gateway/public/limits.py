"""Limits on client connections, enforced in uvicorn's HTTP protocol before a head is parsed.

`limited_protocol()` returns a subclass of uvicorn's httptools protocol (one class per server,
sharing one `Connections` registry) that:

- counts the bytes of each request head before the parser sees them: the parser is never fed
  more than `max_head_bytes` of a head; a longer one is answered 431 and the connection closed;
- gives each head `head_timeout` seconds from its first byte (from the connection's opening for
  the first one): a head still incomplete then is answered 408 (nothing, when no byte came) and
  the connection closed; idle keep-alive connections close after uvicorn's `timeout_keep_alive`;
- gives each request body `body_timeout` seconds between two of its chunks (nginx's
  `client_body_timeout`): a body that stops arriving is answered 408 (nothing, when the
  response already began) and the connection closed; time while the gateway itself does not
  read the body (a held request whose unread body filled uvicorn's buffer) does not count;
- caps the open connections at `max_connections`: a new one past the cap closes the oldest
  connection that has no request in progress (waiting for a head or idle between requests),
  else the one that has been reading a request body the longest (a client that trickles a
  body holds no slot against others; a body the gateway does not read now is not counted),
  or, when every connection is busy, is answered 503 and closed. The cap has to fit in the
  process's open files (`open_files_for`): the gateway raises its limit toward the hard one
  at start, and keeps fewer connections when even that is short.

A graceful stop (SIGTERM; a replacement's old gateway) closes the listener first. A
connection is then never closed under a client that may be sending on it: one the kernel
handed over just before the listener closed, one idle between requests (its client may send
the next at any moment), and one whose answer began before the stop (it could not say
`connection: close`, so its client may reuse it as soon as it ends) are kept. Their next
request is served and answered `connection: close`; one that sends nothing for
`FIRST_REQUEST_GRACE_S` (from the stop, or from the end of its answer) is closed.

A refused connection gets its answer and the end of the gateway's output, then the gateway
stops reading it (what the client still sends is never read) and closes it `LINGER_S` later,
so a client that reads while it sends gets the answer before the close resets the connection.
An HTTP/1.0 request is answered in HTTP/1.0 (`http10`). A response start that carries
`DEFER_HEAD` (an answer whose body follows at once) goes out with its first body bytes, in
one write (`HopCycle`). The cycle also writes a stream's chunks from where they arrive
(`HopCycle.write_chunk`, `proxy._direct`) and tells a disconnect by a future, no task
(`HopCycle.disconnection`).
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from composer.gateway.public.answers import DEFER_HEAD, error_bytes
from composer.gateway.public.http10 import Http10Cycle
from composer.gateway.status.metrics import Metrics

# Open files besides two per client connection (its own, and its request's upstream one): the
# listening and control sockets, readiness probes, logs.
FILES_BESIDES = 64
# How long a refused connection stays open (not read) after its answer, before it is closed.
LINGER_S = 2.0
# How long a stopping gateway waits for the request of a connection it accepted but has not
# read a byte from (a client sends right after it connects; the head timer bounds the rest).
FIRST_REQUEST_GRACE_S = 2.0


def _answer(status: int, message: str, extra: str = "") -> bytes:
    """A refused connection's whole answer (status line, headers, error body)."""
    body = error_bytes(status, message)
    head = f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
    return f"{head}content-length: {len(body)}\r\nconnection: close\r\n{extra}\r\n".encode() + body


# The answer to a refused connection, by the reason it is closed for (a metric label).
_RESPONSES = {
    "head_too_large": _answer(431, "request head too large"),
    "head_timeout": _answer(408, "request head not received in time"),
    "body_timeout": _answer(408, "request body not received in time"),
    "over_capacity": _answer(503, "too many open connections", "retry-after: 2\r\n"),
}


def _no_delay(transport: asyncio.BaseTransport) -> None:
    """Send each write at once (TCP_NODELAY): an answer written in two parts (head, body) must
    not wait for the client's delayed ACK of the first (40 ms on Linux) on a kept-alive connection."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Joined:
    """The transport while a deferred head waits: the next write (or close) sends it first."""

    __slots__ = ("head", "transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.head = b""

    def write(self, data: bytes) -> None:
        head, self.head = self.head, b""
        self.transport.write(head + data if head else data)

    def close(self) -> None:
        self.write(b"")
        self.transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


_send = RequestResponseCycle.send


class HopCycle(RequestResponseCycle):
    """uvicorn's request cycle; a head sent with `DEFER_HEAD` is written with the body's first
    bytes (set on HTTP/1.1 requests' cycles with `cycle.__class__ = HopCycle`)."""

    def disconnection(self) -> asyncio.Future[None]:
        """A future done when the client disconnects or the response is complete (when
        `receive()` says `http.disconnect`); a new one each call (its taker may cancel it)."""
        future = asyncio.get_running_loop().create_future()
        if self.disconnected or self.response_complete:
            future.set_result(None)
        else:
            waiting = self.__dict__.setdefault("_disconnection", [])
            waiting.append(future)
        return future

    def settle(self) -> None:
        """The client disconnected, or the response is complete: `disconnection()`s are done."""
        for future in self.__dict__.pop("_disconnection", ()):
            if not future.done():
                future.set_result(None)

    def can_write(self) -> bool:
        """A body chunk may go out now with `write_chunk`, in order: the head went out (chunked),
        the client reads (its buffer is not full) and no `send` waits; a disconnected client's
        chunks are dropped, as `send` drops them."""
        if self.disconnected:
            return True
        return self.chunked_encoding is True and not self.flow.write_paused and not self.response_complete

    def write_chunk(self, body: bytes) -> None:
        """Write `body` as `send` would a body message with more to come (after `can_write`)."""
        if body and not self.disconnected:
            transport = self.transport
            if type(transport) is _Joined and not transport.head:  # the head went out: no wrapper
                transport = self.transport = cast(asyncio.Transport, transport.transport)
            transport.write(b"%x\r\n%b\r\n" % (len(body), body))

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and message.get(DEFER_HEAD) and not self.response_started:
            joined = _Joined(self.transport)
            self.transport = cast(asyncio.Transport, _Captured(joined))  # duck-typed
            try:
                await _send(self, message)
            finally:
                self.transport = cast(asyncio.Transport, joined)
            return
        await _send(self, message)
        if self.response_complete:
            self.settle()
        transport = self.transport
        if isinstance(transport, _Joined) and (self.response_complete or self.disconnected):
            self.transport = transport.transport
            if transport.head and not self.disconnected:
                transport.write(b"")  # nothing was written with it (a HEAD answer)


class _Captured:
    """The transport for the head's one write: kept to go out with the body."""

    __slots__ = ("joined",)

    def __init__(self, joined: _Joined) -> None:
        self.joined = joined

    def write(self, data: bytes) -> None:
        self.joined.head = data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.joined.transport, name)


@dataclass(frozen=True)
class ConnectionLimits:
    """The limits of one public port."""

    max_head_bytes: int = 64 * 1024
    head_timeout: float = 10.0
    max_connections: int = 1024
    body_timeout: float = 60.0


def open_files_for(max_connections: int) -> tuple[int, str | None]:
    """Raise this process's open-file limit toward what `max_connections` needs; the cap that
    fits in it, with a warning when that is below the setting.

    A container gets the engine's default `nofile` (some engines give 1024): past it, accept()
    fails and the port stops answering before the cap could close an idle connection.
    """
    needed = 2 * max_connections + FILES_BESIDES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    wanted = needed if hard == unlimited else min(needed, hard)
    if soft != unlimited and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    if soft == unlimited or soft >= needed:
        return max_connections, None
    fits = max(1, (soft - FILES_BESIDES) // 2)
    return fits, (
        f"max_connections={max_connections} needs {needed} open files, and this container allows "
        f"{soft} (its nofile ulimit): at most {fits} client connections are kept open"
    )


@dataclass
class Connections:
    """The open connections of one server; `idle` (insertion-ordered) holds those without a
    request in progress, oldest first; `reading` those reading a request body, oldest first."""

    limits: ConnectionLimits
    metrics: Metrics
    open: int = 0
    idle: dict[LimitedProtocol, None] = field(default_factory=dict)
    reading: dict[LimitedProtocol, None] = field(default_factory=dict)

    def evictable(self) -> LimitedProtocol | None:
        """The connection to close for a new one (see the module's docstring)."""
        if self.idle:
            return next(iter(self.idle))
        return next((c for c in self.reading if not c.flow.read_paused), None)


class LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with head size, head time and connection count limits."""

    registry: Connections  # set on the subclass `limited_protocol` makes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # waiting for (the rest of) a request head
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False  # answered and lingering: input is dropped
        self._counted = False
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_seen = 0.0  # loop time of the body's last chunk
        self._last = False  # the gateway is stopping: the request being read is the last

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(cast(asyncio.Transport, transport))  # a stream transport
        _no_delay(transport)
        registry = self.registry
        registry.open += 1
        self._counted = True
        registry.metrics.connections.set(registry.open)
        if registry.open > registry.limits.max_connections:
            oldest = registry.evictable()
            if oldest is not None:
                registry.metrics.connections_closed.labels("evicted").inc()
                oldest._close_idle()
            else:
                registry.metrics.connections_closed.labels("over_capacity").inc()
                self._refuse("over_capacity")
                return
        registry.idle[self] = None
        self._head_timer = self.loop.call_later(registry.limits.head_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        self._stop_body_timer()
        if self._counted:
            self._counted = False
            self.registry.open -= 1
            self.registry.metrics.connections.set(self.registry.open)
        self.registry.idle.pop(self, None)
        super().connection_lost(exc)
        if isinstance(self.cycle, HopCycle):
            self.cycle.settle()

    def shutdown(self) -> None:
        """A graceful stop: close a connection only where its client cannot be sending on it
        (see the module's docstring)."""
        cycle = self.cycle
        if self.transport.is_closing():
            return
        self._last = True  # a request still to come is answered `connection: close`
        if cycle is not None and not cycle.response_complete:
            if not cycle.response_started:
                cycle.keep_alive = False  # its answer says `connection: close`, then closes
            return  # an answer under way could not say so: the grace starts once it ends
        if not self._head_bytes:
            self.loop.call_later(FIRST_REQUEST_GRACE_S, self._close_if_silent)

    def _close_if_silent(self) -> None:
        """Close a stopping gateway's connection that sent no request in its grace."""
        cycle = self.cycle
        idle = cycle is None or cycle.response_complete
        if idle and not self._head_bytes and not self.transport.is_closing():
            self._close_idle()

    def _close_idle(self) -> None:
        self.registry.idle.pop(self, None)
        self._stop_head_timer()
        self._stop_body_timer()
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # answered and closing: ignore anything read before the pause took effect
        if not self._in_head:
            self._body_seen = self.loop.time()
            super().data_received(data)  # a body (or the rest of a pipeline): uvicorn's path
            return
        if self._head_timer is None:  # first byte of a head on a kept-alive connection
            self._head_timer = self.loop.call_later(self.registry.limits.head_timeout, self._head_timed_out)
        room = self.registry.limits.max_head_bytes - self._head_bytes
        if len(data) <= room:
            self._head_bytes += len(data)
            super().data_received(data)
            return
        # More than the head may hold: feed only what fits; if the head ends inside it, the
        # rest is body (or the next request) and goes on; otherwise the head is too large.
        self._head_bytes += room
        super().data_received(data[:room])
        if self._in_head:
            if not self.transport.is_closing():
                self.registry.metrics.connections_closed.labels("head_too_large").inc()
                self._refuse("head_too_large")
            return
        if not self.transport.is_closing():
            self.data_received(data[room:])

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._stop_head_timer()
        self.registry.idle.pop(self, None)
        self._start_body_timer()
        super().on_headers_complete()
        cycle = self.cycle
        if self._last and cycle is not None:
            cycle.keep_alive = False  # answered `connection: close`, then closed
        if cycle is not None and cycle.scope is self.scope:
            # HTTP/1.0 is answered in HTTP/1.0, never chunked; else a head may wait for its body
            cycle.__class__ = Http10Cycle if self.scope.get("http_version") == "1.0" else HopCycle

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self.pipeline and not self._refused:
            self.registry.idle[self] = None  # idle between requests: may be evicted
            if self._last:  # stopping: the client may send once more; closed if it does not
                self.loop.call_later(FIRST_REQUEST_GRACE_S, self._close_if_silent)

    def on_message_complete(self) -> None:
        self._stop_body_timer()
        super().on_message_complete()
        self._in_head = True  # whatever comes next is the next request's head
        self._head_bytes = 0

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _start_body_timer(self) -> None:
        self._body_seen = self.loop.time()
        self.registry.reading[self] = None
        self._body_timer = self.loop.call_later(self.registry.limits.body_timeout, self._body_check)

    def _stop_body_timer(self) -> None:
        self.registry.reading.pop(self, None)
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_check(self) -> None:
        """The body timer fired: wait on from the last chunk, or end a body that stopped."""
        self._body_timer = None
        if self.transport.is_closing():
            return
        if self.flow.read_paused:  # the gateway is not reading (a held request): not the client's stall
            self._body_seen = self.loop.time()
        due = self._body_seen + self.registry.limits.body_timeout
        if due > self.loop.time():
            self._body_timer = self.loop.call_at(due, self._body_check)
            return
        self.registry.reading.pop(self, None)
        self.registry.metrics.connections_closed.labels("body_timeout").inc()
        cycle = self.cycle
        if cycle is None or cycle.response_started:
            self.transport.close()  # an answer is under way: it cannot change
            return
        # whatever the app sends now goes nowhere; what it receives is a disconnect
        cycle.disconnected = True
        cycle.message_event.set()
        if isinstance(cycle, HopCycle):
            cycle.settle()
        self._refuse("body_timeout")

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._in_head:
            return
        self.registry.metrics.connections_closed.labels("head_timeout").inc()
        if self._head_bytes:
            self._refuse("head_timeout")
        else:
            self._close_idle()

    def _refuse(self, reason: str) -> None:
        """Answer the refusal for `reason`, stop sending, drop further input for `LINGER_S`, then close."""
        self._refused = True
        self._stop_head_timer()
        self._stop_body_timer()
        self.registry.idle.pop(self, None)
        if self.cycle is not None and not self.cycle.response_complete and not self.cycle.disconnected:
            # a pipelined head went wrong while a response is still going out: end the
            # connection after that response instead of writing into it
            self.cycle.keep_alive = False
            self.flow.pause_reading()
            return
        self.transport.write(_RESPONSES[reason])
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.flow.pause_reading()  # what the client still sends is never read
        self.loop.call_later(LINGER_S, self.transport.close)


def limited_protocol(limits: ConnectionLimits, metrics: Metrics) -> type[LimitedProtocol]:
    """A protocol class for `uvicorn.Config(http=...)` enforcing `limits` on one server."""
    registry = Connections(limits, metrics)
    return type("GatewayHttpProtocol", (LimitedProtocol,), {"registry": registry})
