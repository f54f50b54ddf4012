"""The public ASGI app: key check, hold, and unbuffered forwarding to the backend.

Each request runs through `ProxyApp.stages` in order (screen, key, alias, body, probe, hold,
route, continuation, admit and forward), each answering it or passing it on. For each request
(its path already canonical: `screen`): off the allow-list, 404; a keyed
path without the right key, 401 before it takes a queue slot; a request without the key is
never held (admitted at once or 503); status routes and CORS preflights are forwarded without
their body. Then it goes upstream on a pooled keep-alive connection (`pool`) and each read of
the response passes on at once whatever has arrived. A client that disconnects cancels its
upstream request. A request waiting for its response head from a backend that stops answering
`/health` is answered 504 after `unresponsive_timeout` (`liveness`). Bodies up to
`REPLAY_LIMIT` are read first so the request can be sent again, once, when the backend cannot
have read it (`Attempt.unread`); larger ones stream through. Every forwarded answer carries
`x-served-by` (the member that answered) and `Server-Timing: gateway;dur=MS` (the gateway's
own time to the head, the backend's wait left out). An eligible streamed completion
(`continuation`) is relayed by its record, which continues it on the next upstream the gate
admits it to when the backend breaks or stalls (`_reopen`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
from starlette.types import Message, Receive, Scope, Send
from yarl import URL

from composer.gateway.public import bodies, continuation, listing
from composer.gateway.public.answers import DEFER_HEAD, send_error, sse_error
from composer.gateway.public.bodies import MAX_BODY as REPLAY_LIMIT
from composer.gateway.public.continuation import ContinuationFailed, Leg, Paused, Stalled
from composer.gateway.public.keepalive import HeldStream
from composer.gateway.public.pool import Interrupted, Pool, Response, Unreachable
from composer.gateway.public.routes import KeyCheck, is_dev_route, is_forwarded, needs_key
from composer.gateway.routing.gate import ClientGone, Gate, Refused, Ticket
from composer.gateway.routing.live import once
from composer.gateway.routing.liveness import Liveness, Unresponsive
from composer.gateway.status.metrics import Metrics
from composer.gateway.wire import PROBE_HEADER

if TYPE_CHECKING:
    from composer.gateway.config import GatewayConfig
    from composer.gateway.routing.live import LiveSet, Member
    from composer.gateway.routing.switching import Switcher

log = logging.getLogger("gateway")

# Idle probe connections close after this long: under vLLM's own keep-alive timeout (5 s),
# so the gateway never sends on a connection the server is closing (`pool.KEEPALIVE_S` alike).
UPSTREAM_KEEPALIVE_S = 4.0
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"host",
        b"expect",
        PROBE_HEADER.encode(),
    }
)
# Headers aiohttp would add on its own to a probe.
NO_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
SERVED_BY = b"x-served-by"
SERVER_TIMING = b"server-timing"
# The scope key of the loop time the request reached the gateway's app (`screen`).
STARTED = "gateway.started"
# The scope key under which `_switch` leaves the live router's hint: (alias variant, prompt tokens).
ROUTE_HINT = "gateway.route_hint"
# The scope key of an eligible stream's record (`continuation.Stream`).
STREAM = "gateway.stream"
# Errors that mean the backend went away before it answered (`Attempt.unread`: sent again
# once); CONNECT_ERRORS (connection errors too) mean it could not be reached.
# (`pool`'s errors are aiohttp's client errors.)
CONNECT_ERRORS = (Unreachable,)
GONE_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)


def upstream_session() -> aiohttp.ClientSession:
    """The session of the liveness probes (`liveness`; create it inside the running loop)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, use_dns_cache=False, keepalive_timeout=UPSTREAM_KEEPALIVE_S),
        timeout=aiohttp.ClientTimeout(total=None, connect=5.0),
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        skip_auto_headers=NO_AUTO_HEADERS,
        trust_env=False,
    )


@dataclass(slots=True)
class Attempt:
    """One sending of a request upstream (`sent`: its head was written; `reused`: on a pooled connection)."""

    ticket: Ticket
    sent: bool = False
    reused: bool = False
    waited: float = 0.0  # seconds from the request's start upstream to its response head

    @property
    def unread(self) -> bool:
        """True when a failure before any answer means the backend never read the request: the
        head was not written, or the connection was a kept-alive one (closed idle by the server)."""
        return not self.sent or self.reused

    def dispatched(self, reused: bool) -> None:
        """The request head is written upstream (`reused`: on a kept-alive connection): the
        held request after it may be released."""
        self.sent = True
        self.reused = reused
        self.ticket.mark_dispatched()


def _forward_headers(raw: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Request or response headers without hop-by-hop ones (and those `Connection` names)."""
    kept = [(k, v) for k, v in raw if k.lower() not in HOP_BY_HOP]
    if len(kept) == len(raw):  # no hop-by-hop header: no Connection header to name more
        return kept
    named = set()
    for key, value in raw:
        if key.lower() == b"connection":
            named.update(v.strip().lower() for v in value.split(b","))
    return [(k, v) for k, v in kept if k.lower() not in named] if named else kept


def _request_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The client's headers to send upstream."""
    return _forward_headers(raw)


async def _read_prefix(receive: Receive) -> Body:
    """Read the body up to REPLAY_LIMIT. A body over the limit is never complete (nor read or
    rewritten), even when its last chunk crossed the limit."""
    chunks: list[bytes] = []
    size, ended = 0, False
    while not ended and size <= REPLAY_LIMIT:
        chunk, ended = await _next_chunk(receive)
        if chunk:
            chunks.append(chunk)
            size += len(chunk)
    return Body(chunks, ended and size <= REPLAY_LIMIT, receive, ended)


async def _next_chunk(receive: Receive) -> tuple[bytes, bool]:
    """The body's next chunk and whether it is the last; raises `ClientGone`."""
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientGone()
    return message.get("body", b""), not message.get("more_body", False)


def _wait_disconnect(receive: Receive) -> Awaitable[None]:
    """Complete when the client disconnects (only valid once the whole body was read): the
    server's own future where it has one (`limits.HopCycle.disconnection`: no task), else a
    coroutine that waits for `receive()` to say so."""
    disconnection = getattr(getattr(receive, "__self__", None), "disconnection", None)
    return disconnection() if disconnection is not None else _receive_disconnect(receive)


async def _receive_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class Body:
    """The request body to forward: replayable bytes, or the read prefix followed by the rest."""

    def __init__(self, chunks: list[bytes], complete: bool, receive: Receive, ended: bool) -> None:
        self.data = b"".join(chunks) if complete else b""
        self.complete = complete
        self._prefix = chunks
        self._ended = ended  # the prefix is the whole body (over the limit): nothing more to receive
        self._receive = receive
        self.started = False
        self.resent = False  # sent again once already (a request is sent at most twice)

    def replayable(self) -> bool:
        """True when the body can be sent again."""
        return self.complete or not self.started

    async def stream(self) -> AsyncIterator[bytes]:
        """Yield a body that was too large to read first: the prefix read, then the rest."""
        self.started = True
        for chunk in self._prefix:
            yield chunk
        ended = self._ended
        while not ended:
            chunk, ended = await _next_chunk(self._receive)
            if chunk:
                yield chunk


@dataclass(slots=True)
class Request:
    """One request on its way through `ProxyApp.stages` (what each stage leaves for the next)."""

    scope: Scope
    receive: Receive
    send: Send  # wrapped by the stages that change the answer (aliases, a body-less route)
    body: Body  # none (status routes, CORS preflights) until `_body` reads it
    may_hold: bool = True  # it has the key (or none is needed): it may wait in the gate
    deadline: float = 0.0
    watcher: asyncio.Future[None] | None = None  # the client's disconnect
    held: HeldStream | None = None


class ProxyApp:
    """ASGI app forwarding every request (but dev routes) to a member of the upstream set."""

    def __init__(
        self,
        gate: Gate,
        live: LiveSet,
        keys: KeyCheck,
        metrics: Metrics,
        switcher: Switcher,
        config: GatewayConfig,
    ) -> None:
        self.gate = gate
        self.live = live  # the members requests go to (`LiveSet.choose`)
        self.session: aiohttp.ClientSession | None = (
            None  # the probes', opened by `open()` in the serving loop
        )
        self.pool = Pool()  # the forwarded requests' connections
        self.keys = keys
        self.metrics = metrics
        self.switcher = switcher
        self.served_name = config.served_name
        self.streams: set[continuation.Stream] = set()  # recorded streams under way
        self.unrecorded: dict[Ticket, str] = {}  # streams under way it cannot continue: their URL
        self.liveness = Liveness(config.unresponsive_timeout, lambda: self.session)
        self.switch_waiting = 0  # requests waiting for a switch to their alias's variant
        # a request's path through the app: each stage answers it (True) or passes it on
        self.stages: tuple[Callable[[Request], Awaitable[bool]], ...] = (
            self._screen,
            self._key,
            self._alias,
            self._body,
            self._probe,
            self._hold,
            self._route,
            self._continuation,
            self._admit_and_forward,
        )
        self.configure(config)

    def configure(self, config: GatewayConfig) -> None:
        """The settings (applied in place) for the requests that start from now on."""
        self.stall_timeout = config.stall_timeout
        self.hold_keepalive = config.hold_keepalive  # seconds between SSE comments to a held stream (0: off)
        self.continue_streams = config.continue_streams  # a broken eligible stream continues elsewhere
        self.liveness.set_timeout(config.unresponsive_timeout)
        # aliases listed in /v1/models (with switch_on_model)
        self.aliases = dict(config.aliases) if config.switch_on_model else {}

    def open(self) -> None:
        """Open the probes' session (inside the serving loop)."""
        self.session = upstream_session()

    async def aclose(self) -> None:
        """Close the upstream connections."""
        await self.pool.close()
        if self.session is not None:
            await self.session.close()

    async def _refuse(self, send: Send, refused: Refused) -> None:
        """Count and answer a request the gateway refuses (with Retry-After: waiting helps)."""
        self.metrics.refused.labels(refused.reason).inc()
        await send_error(send, refused.status, str(refused), refused.retry_after or self.gate.retry_after)

    def _listing_aliases(self, send: Send) -> Send:
        """`send` for a `/v1/models` answer: a 200 JSON body gets the aliases' entries."""
        start: dict[str, Any] = {}
        parts: list[bytes] = []

        async def relay(message: Any) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body" or not start:
                await send(message)
                return
            parts.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(parts)
            headers = start["headers"]
            if start["status"] == 200 and not any(k.lower() == b"content-encoding" for k, _ in headers):
                body = listing.with_aliases(body, self.served_name, self.aliases)
                headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
                headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})

        return relay

    async def _switch(
        self,
        scope: Scope,
        body: Body,
        deadline: float,
        watcher: asyncio.Future[None] | None,
        held: HeldStream | None = None,
    ) -> None:
        """Read the body's model and prompt size; an alias waits for its variant and is renamed to
        the served name. Raises `Refused` or `ClientGone`."""
        seen = bodies.inspect(scope["method"], scope["path"], scope["headers"], body.data)
        if seen is None:
            return
        self.switcher.observe(seen.prompt_tokens)
        live = self.live.active
        aliased = self.switcher.config.switch_on_model or live
        variant = self.switcher.alias_variant(seen.model) if aliased else None
        if live:
            scope[ROUTE_HINT] = (variant, seen.prompt_tokens)
        if variant is None or seen.model is None:
            return
        if not live:
            self.switch_waiting += 1
            waiting = asyncio.ensure_future(self.switcher.admit(variant, seen.model, deadline))
            try:
                waits: set[asyncio.Future[None]] = {waiting} if watcher is None else {waiting, watcher}
                both = asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                await (held.wait(both) if held is not None else both)
                if not waiting.done():
                    raise ClientGone
                await waiting
            finally:
                if not waiting.done():
                    waiting.cancel()
                self.switch_waiting -= 1
        _replace_body(scope, body, bodies.with_model(seen.payload, self.served_name))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the request through `stages` in order until one answers it."""
        if scope["type"] != "http":
            return
        scope.setdefault(STARTED, asyncio.get_running_loop().time())
        request = Request(scope, receive, send, Body([], True, receive, True))
        try:
            for stage in self.stages:
                if await stage(request):
                    return
        except Refused as refused:
            await self._refuse(_out(request.send, request.held), refused)
        except ClientGone:
            pass
        finally:
            watcher = request.watcher
            if watcher is not None and not watcher.done():
                watcher.cancel()

    async def _screen(self, r: Request) -> bool:
        """Off the allow-list (its path already canonical: the public app screened it): 404."""
        path: str = r.scope["path"]
        if is_forwarded(path):
            return False
        self.metrics.refused.labels("dev_route" if is_dev_route(path) else "not_found").inc()
        await send_error(r.send, 404, f"no route {path!r} on this port")
        return True

    async def _key(self, r: Request) -> bool:
        """A keyed path without the right key: 401, before it takes a queue slot; a request
        without the key is never held."""
        if not self.keys.enabled:
            return False
        auth = next((v for k, v in r.scope["headers"] if k == b"authorization"), None)
        r.may_hold = self.keys.allows(auth)
        if r.may_hold or not needs_key(r.scope["path"]) or r.scope["method"] == "OPTIONS":
            return False
        self.metrics.refused.labels("unauthorized").inc()
        await send_error(r.send, 401, "Unauthorized: a valid API key is required (Authorization: Bearer KEY)")
        return True

    async def _alias(self, r: Request) -> bool:
        """The model list gets one entry per alias."""
        if self.aliases and r.scope["path"] == listing.MODELS_PATH and r.scope["method"] == "GET":
            r.send = self._listing_aliases(r.send)
        return False

    async def _body(self, r: Request) -> bool:
        """Read the body's first `REPLAY_LIMIT` bytes; status routes and CORS preflights need no
        body: never wait for one. Raises `ClientGone`."""
        r.deadline = self.gate.deadline()
        if not needs_key(r.scope["path"]) or r.scope["method"] == "OPTIONS":
            r.send = _without_body(r.scope, r.send)
        else:
            r.body = await _read_prefix(r.receive)
        return False

    async def _probe(self, r: Request) -> bool:
        """A holder's readiness probe: past the hold, never queued (an unknown token: 403)."""
        probe = next((v for k, v in r.scope["headers"] if k == PROBE_HEADER.encode()), None)
        if probe is None:
            return False
        if not self.gate.probe_allowed(probe):
            self.metrics.refused.labels("probe_token").inc()
            await send_error(r.send, 403, "unknown probe token")
        else:
            await self._forward(Ticket(self.gate), r.scope, r.receive, r.send, r.body, None, probe=True)
        return True

    async def _hold(self, r: Request) -> bool:
        """Watch for the client's disconnect; a held POST gets its headers and keep-alive
        comments while it waits (`HeldStream`)."""
        if r.body.complete:
            r.watcher = asyncio.ensure_future(_wait_disconnect(r.receive))
            if self.hold_keepalive and r.may_hold and r.scope["method"] == "POST":
                r.held = HeldStream(r.send, self.hold_keepalive, r.body.data)
        return False

    async def _route(self, r: Request) -> bool:
        """Bodies are read for switching, the automatic policy, or while a live set routes (an
        alias may wait for its variant). Raises `Refused` or `ClientGone`."""
        if r.body.complete and (self.switcher.config.inspects_bodies or self.live.active):
            await self._switch(r.scope, r.body, r.deadline, r.watcher, r.held)
        return False

    async def _continuation(self, r: Request) -> bool:
        """An eligible streamed completion is recorded so that it can be continued: upstream is
        asked for its token ids (a body without `"stream"` is no stream, as `HeldStream.wanted`)."""
        scope, body = r.scope, r.body
        if not (body.complete and self.continue_streams and scope["path"] in continuation.PATHS):
            return False
        if b'"stream"' in body.data:
            seen = bodies.inspect(scope["method"], scope["path"], scope["headers"], body.data)
            stream = continuation.prepare(scope["path"], seen.payload, self.metrics) if seen else None
            if stream is not None:
                scope[STREAM] = stream
                if not stream.wants_ids:
                    _replace_body(scope, body, stream.body())
        return False

    async def _admit_and_forward(self, r: Request) -> bool:
        """Admitted by the gate (held while it holds), then forwarded; sent again, at the
        queue's head, when the backend cannot have read it. Raises `Refused` or `ClientGone`."""
        front = False
        while True:
            disconnected = asyncio.shield(r.watcher) if r.watcher is not None else None
            entering = self.gate.enter(r.deadline, front=front, disconnected=disconnected, hold=r.may_hold)
            if r.held is not None and self.gate.would_hold():
                ticket = await r.held.wait(entering)
            else:
                ticket = await entering
            try:
                out = _out(r.send, r.held)
                again = await self._forward(ticket, r.scope, r.receive, out, r.body, r.watcher)
            finally:
                ticket.done(completed=not again)
            if not again:
                return True
            front = True

    async def _forward(
        self,
        ticket: Ticket,
        scope: Scope,
        receive: Receive,
        send: Send,
        body: Body,
        watcher: asyncio.Future[None] | None,
        *,
        probe: bool = False,
    ) -> bool:
        """Forward once to the member `LiveSet.choose` gives; True: the backend went away before
        answering, queue it again (never for a holder's `probe`). A connection failure takes
        the member out until its probe passes."""
        chosen = self.live.choose(scope.get(ROUTE_HINT), probe)
        if chosen is None:  # none ready since the gate admitted it: the gate holds it again
            if body.replayable():
                return True
            await send_error(send, 503, "no upstream is ready", self.gate.retry_after)
            return False
        member, release = chosen
        failures: list[str] = []
        # The canonical path (screened), sent as it is.
        path = scope["path"].encode()
        if scope["query_string"]:
            path += b"?" + scope["query_string"]
        attempt = Attempt(ticket)
        data = body.data if body.complete else body.stream()
        headers = _request_headers(scope["headers"])
        started = False
        response: Response | None = None
        with _Interrupt() as cut:
            ticket.cancel = cut.interrupt
            if ticket.cut_requested:
                cut.interrupt()
            try:
                response = await self._send_upstream(
                    scope["method"], member.url, path, headers, data, attempt, watcher
                )
                if response is None:
                    return False  # client went away
                ticket.mark_dispatched()
                self.metrics.forwarded.inc()
                if self._is_stream(response):
                    stream = scope.get(STREAM) if response.status == 200 else None
                    if stream is None and self.continue_streams:
                        self.unrecorded[ticket] = member.url  # a switch counts it as refused
                    leg = self._leg(scope, member, response, ticket, release, failures, stream is not None)
                    chunks = leg.chunks
                    direct = _direct(send)
                    if stream is not None:
                        reopen = functools.partial(self._reopen, scope)
                        chunks = stream.relay(leg, reopen, self.hold_keepalive, self.streams, direct)
                    elif direct is not None:
                        ready, write = direct
                        leg.pipe(lambda chunk: ready() and write(chunk) is None)
                else:
                    chunks = None  # read as it arrives, its end sent with its last bytes
                headers = _forward_headers(response.raw_headers)
                headers.append((SERVED_BY, self._served_by(member)))
                headers.append((SERVER_TIMING, _timing(scope, attempt)))
                started = True
                gone = watcher if watcher is not None else asyncio.ensure_future(_wait_disconnect(receive))
                try:
                    with _Interrupt(gone):
                        await _relay(send, response, headers, chunks)
                finally:
                    if gone is not watcher:
                        gone.cancel()
            except GONE_ERRORS as err:
                failures.append(f"{type(err).__name__}: {err}")
                member.poller.mark_down(failures[-1])  # new requests wait (or go to the others) meanwhile
                # queued again once, and only when the backend cannot have read it
                if not (probe or started or not attempt.unread or body.resent or not body.replayable()):
                    body.resent = True
                    self.metrics.retries.inc()
                    return True
                what = "the backend could not be reached"
                if not isinstance(err, CONNECT_ERRORS):
                    log.warning("backend broke %s %s: %s", scope["method"], scope["path"], type(err).__name__)
                    what = "the backend closed the connection before answering"
                await self._bad_gateway(send, err, started, what)
                return False
            except ClientGone:
                return False
            except Unresponsive as err:
                log.warning("unresponsive backend %s: %s %s", member.url, scope["method"], scope["path"])
                self.metrics.upstream_errors.inc()
                failures.append("asleep" if err.asleep else "unresponsive")
                timeout = self.liveness.timeout
                if err.asleep:
                    member.poller.mark_down("/is_sleeping: true")
                    await send_error(send, 503, "the backend was put to sleep before it answered: send again")
                else:
                    member.poller.mark_down(f"/health unanswered for {timeout:g}s")
                    why = f"the backend answered neither this request nor its /health for {timeout:g}s"
                    await send_error(send, 504, f"{why} (unresponsive_timeout)")
                return False
            except aiohttp.ClientError as err:
                log.warning("backend error %s %s: %s", scope["method"], scope["path"], type(err).__name__)
                failures.append(type(err).__name__)
                await self._bad_gateway(send, err, started)
                return False
            finally:
                ticket.cancel = None
                self.unrecorded.pop(ticket, None)
                if response is not None:
                    response.close()  # drops the connection unless the body was read to its end
                release(not failures)
        if cut.caught:
            log.warning("cut %s %s at drain timeout", scope["method"], scope["path"])
            if not started:
                await send_error(
                    send, 503, "cut by a drain timeout (the variant is being replaced)", self.gate.retry_after
                )
        return False

    def _leg(
        self,
        scope: Scope,
        target: Member,
        response: Response,
        ticket: Ticket,
        release: Callable[[bool], None],
        failures: list[str],
        resumable: bool = True,
    ) -> Leg:
        """`response`'s SSE body from `target` as a `continuation.Leg`, as it arrives: a drain's
        cut or a stall ends it with an error event and `[DONE]` (`resumable`: a stall raises
        `Stalled`; its `pause()`: `Paused`); its `end(reason)` (a break takes `target` out until
        its probe passes) lets the ticket, the count and the connection go."""
        stall_s = self.stall_timeout or None  # 0: no stall timeout
        loop = asyncio.get_running_loop()
        reading = False  # a read is under way (`Response.interrupt` ends it)
        began = 0.0  # when it began (or the last bytes a pipe took came)
        watchdog: asyncio.TimerHandle | None = None  # one stall timer for the whole stream
        paused = False
        piped: Callable[[bytes], bool] | None = None  # `Leg.pipe`'s sink

        def cut() -> None:  # the ticket's `cut_requested` is set: the read under way stops
            response.sink = None  # nothing more goes on past the read
            if reading:
                response.interrupt()

        def pause() -> None:  # stop reading now: it goes on on another upstream
            nonlocal paused
            paused = True
            ticket.paused = True  # a drain does not count it as finished
            cut()

        def take(chunk: bytes) -> bool:  # the response's sink while piped: bytes as they arrive
            nonlocal began
            if not reading or paused or ticket.cut_requested or piped is None or not piped(chunk):
                return False
            began = loop.time()  # (the stall timer's read goes on)
            return True

        def pipe(sink: Callable[[bytes], bool] | None) -> None:
            nonlocal piped
            piped = sink
            response.sink = take if sink is not None else None

        def watch() -> None:  # a read that got no bytes for stall_s ends
            nonlocal watchdog
            assert stall_s is not None
            now = loop.time()
            if reading and now >= began + stall_s:
                watchdog = None
                response.sink = None
                response.interrupt()
                return
            watchdog = loop.call_at((began if reading else now) + stall_s, watch)

        def unwatch() -> None:
            nonlocal watchdog
            if watchdog is not None:
                watchdog.cancel()
                watchdog = None

        async def chunks() -> AsyncIterator[bytes]:
            nonlocal reading, began, watchdog
            try:
                while not ticket.cut_requested:
                    if paused:
                        raise Paused
                    began = loop.time()
                    if watchdog is None and stall_s is not None:
                        watchdog = loop.call_at(began + stall_s, watch)
                    reading, caught = True, False
                    try:
                        chunk = await response.readany()
                    except Interrupted:
                        caught = True
                    reading = False
                    if caught:
                        response.sink = None
                        if ticket.cut_requested:
                            break
                        if paused:
                            raise Paused
                        # new requests are held until the poller sees the backend ready again
                        log.warning(
                            "stall: no bytes for %gs on %s %s",
                            self.stall_timeout,
                            scope["method"],
                            scope["path"],
                        )
                        self.metrics.stalled.inc()
                        failures.append("stall")
                        target.poller.mark_down(f"a stream stalled for {self.stall_timeout:g}s")
                        event = sse_error(
                            504, f"the backend sent nothing for {stall_s:g}s (stall_timeout): stream ended"
                        )
                        if resumable:
                            raise Stalled(event)
                        yield event
                        return
                    if not chunk:
                        return
                    yield chunk
                log.warning("cut %s %s at drain timeout", scope["method"], scope["path"])
                yield sse_error(
                    503, "stream cut: the variant is being replaced and the drain timeout ran out"
                )
            finally:
                reading = False
                response.sink = None
                unwatch()

        def end(reason: str | None) -> None:
            if reason is not None:
                log.warning("stream broke on %s: %s", target.url, reason)
                failures.append(reason)
                target.poller.mark_down(reason)
            ticket.cancel = None
            unwatch()
            response.close()
            release(reason is None)
            ticket.done()

        ticket.cancel = cut  # a cut ends the stream with an error event
        return Leg(chunks(), once(end), pause, target.url, pipe)

    def pause_streams(self, url: str | None = None, context: int | None = None) -> tuple[int, int]:
        """Pause the recorded streams on the upstream at `url` (None: every one) but those that
        would not fit in `context` tokens: each goes on as after a break, no failure counted.
        Returns (paused, streams there it cannot continue)."""
        streams = [stream for stream in list(self.streams) if url in (None, stream.upstream)]
        paused = sum(stream.pause(context) for stream in streams)
        refused = sum(1 for stream in streams if stream.refused is not None and not stream.done)
        return paused, refused + sum(1 for at in list(self.unrecorded.values()) if url in (None, at))

    async def _reopen(self, scope: Scope, path: str, data: bytes) -> Leg:
        """`continuation.Reopen`: a turn at the gate's head, then `data` to `path` on a ready
        upstream (one that cannot be reached is taken out, the next tried); raises
        `ContinuationFailed` when none answers within hold_timeout or one refuses."""
        deadline = self.gate.deadline()
        skipped = (b"content-length", b"transfer-encoding", b"content-type")
        headers = _request_headers([(k, v) for k, v in scope["headers"] if k.lower() not in skipped])
        headers.append((b"content-type", b"application/json"))
        while True:
            try:
                ticket = await self.gate.enter(deadline, front=True)
            except Refused as refused:
                raise ContinuationFailed(str(refused)) from None
            chosen = self.live.choose(scope.get(ROUTE_HINT))
            if chosen is None:  # none ready since the gate admitted it
                ticket.done(completed=False)
                await asyncio.sleep(self.live.config.poll_interval)
                continue
            target, release = chosen
            try:
                response = await self._send_upstream(
                    "POST", target.url, path.encode(), headers, data, Attempt(ticket)
                )
            except (aiohttp.ClientError, Unresponsive) as err:
                target.poller.mark_down(f"{type(err).__name__}: {err}")
                release(False)
                ticket.done(completed=False)
                continue
            except BaseException:
                release(True)
                ticket.done(completed=False)
                raise
            assert response is not None  # no watcher: only the backend's answer ends the wait
            self.metrics.forwarded.inc()
            if response.status != 200 or not self._is_stream(response):
                detail = ""
                with contextlib.suppress(aiohttp.ClientError):
                    detail = (await response.read(300)).decode(errors="replace")
                response.close()
                release(True)
                ticket.done()
                raise ContinuationFailed(f"{target.url} answered {response.status}: {detail}")
            return self._leg(scope, target, response, ticket, release, [])

    def _served_by(self, member: Member) -> bytes:
        """The `x-served-by` value of `member`: a live member's name (`variant/replica`); for the
        set of one, the serving variant's first replica when the gateway knows it, else the
        upstream's host (the variant's service name)."""
        if member.listed:
            return member.name.encode()
        serving = self.switcher.serving
        return (f"{serving}/1" if serving else _host(member.url) or member.name).encode()

    @staticmethod
    def _is_stream(response: Response) -> bool:
        return response.content_type.startswith("text/event-stream")

    async def _bad_gateway(
        self, send: Send, err: Exception, started: bool, what: str = "backend failed"
    ) -> None:
        """Count a backend failure; answer 502 unless the answer already `started`."""
        self.metrics.upstream_errors.inc()
        if not started:
            await send_error(send, 502, f"{what} ({type(err).__name__})")

    async def _send_upstream(
        self,
        method: str,
        base: str,
        path: bytes,
        headers: list[tuple[bytes, bytes]],
        data: bytes | AsyncIterator[bytes],
        attempt: Attempt,
        watcher: asyncio.Future[None] | None = None,
    ) -> Response | None:
        """The response head of `data` sent to `path` on the backend at `base`; None when the client
        disconnected first; `Unresponsive` when the backend stopped answering (sending cancelled)."""
        opening = self.pool.request(method, base, path, headers, data, attempt.dispatched)
        loop = asyncio.get_running_loop()
        asked = loop.time()
        response = None
        with self.liveness.watching(base) as gone, _Interrupt(watcher, gone) as stop:
            response = await opening
        attempt.waited += loop.time() - asked
        if not stop.caught:
            return response
        if stop.why is gone and gone is not None:
            raise Unresponsive(asleep=gone.result())
        return None  # the client went away first


@functools.lru_cache(maxsize=64)
def _host(url: str) -> str | None:
    """The host of an upstream's URL (read once per URL, not per request)."""
    return URL(url).host


def _timing(scope: Scope, attempt: Attempt) -> bytes:
    """`Server-Timing`'s value: the gateway's own time (ms) from the request's arrival to its
    response head, less the time the backend took to answer the head."""
    started = scope.get(STARTED)
    own = asyncio.get_running_loop().time() - started - attempt.waited if started is not None else 0.0
    return b"gateway;dur=%.3f" % (max(own, 0.0) * 1000)


class _Interrupt:
    """Ends a block early: `interrupt()` (or the completion of a future it watches) cancels the
    task running it, once, and the block's end by that cancellation is taken as its end
    (`caught`); a cancellation from elsewhere goes on. Nested ones each take their own."""

    __slots__ = ("_open", "_task", "_watched", "caught", "why")

    def __init__(self, *watched: asyncio.Future[Any] | None) -> None:
        self._watched = [f for f in watched if f is not None]
        self.why: asyncio.Future[Any] | str | None = None  # what interrupted it
        self.caught = False

    def interrupt(self, why: asyncio.Future[Any] | str = "cut") -> None:
        if self._open and self.why is None:
            self.why = why
            self._task.cancel()

    def __enter__(self) -> _Interrupt:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._open = True
        for future in self._watched:
            future.add_done_callback(self.interrupt)
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        self._open = False  # a completion scheduled before the exit changes nothing now
        for future in self._watched:
            future.remove_done_callback(self.interrupt)
        self.caught = self.why is not None and kind is asyncio.CancelledError and self._task.uncancel() == 0
        return self.caught


async def _relay(
    send: Send,
    response: Response,
    headers: list[tuple[bytes, bytes]],
    chunks: AsyncIterator[bytes] | None,
) -> None:
    """Send the answer: its head, then each read as it arrives (`chunks`, else the response's
    body, whose last read carries the end)."""
    # an answer read as a whole (not a stream) goes out with its head in one write; so does a
    # stream's head when its first bytes came with it (one write, one wake-up of the client)
    start = {"type": "http.response.start", "status": response.status, "headers": headers}
    await send({**start, DEFER_HEAD: True} if chunks is None or response.buffered else start)
    if chunks is None:
        while True:
            chunk = await response.readany()
            more = bool(chunk) and not response.at_eof()
            await send({"type": "http.response.body", "body": chunk, "more_body": more})
            if not more:
                return
    async for chunk in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _direct(send: Send) -> continuation.Direct | None:
    """The server's own writer of a response's body chunks behind `send`, where it has one
    (`limits.HopCycle`): a stream's bytes then go out from where they arrive, with no wake-up of
    the request's task (`Leg.pipe`)."""
    cycle = getattr(send, "__self__", None)
    ready = getattr(cycle, "can_write", None)
    return None if ready is None else (ready, cycle.write_chunk)  # type: ignore[union-attr]


def _replace_body(scope: Scope, body: Body, data: bytes) -> None:
    """Send `data` as the request's body (with its own content-length)."""
    body.data = data
    headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
    scope["headers"] = [*headers, (b"content-length", str(len(data)).encode())]


def _without_body(scope: Scope, send: Send) -> Send:
    """Forward a request without its body; one that announced a body is answered with
    `connection: close` (the gateway never reads it, so the connection cannot be reused)."""
    headers = scope["headers"]
    announced = (
        k == b"transfer-encoding" or (k == b"content-length" and v.strip() != b"0") for k, v in headers
    )
    if not any(announced):
        return send
    scope["headers"] = [(k, v) for k, v in headers if k != b"content-length"]

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
        await send(message)

    return closing


def _out(send: Send, held: HeldStream | None) -> Send:
    """Where an answer goes: into the open stream once a held request's headers went out."""
    return held.send if held is not None and held.started else send
