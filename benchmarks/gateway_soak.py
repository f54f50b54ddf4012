"""The soak part of `bench_gateway.py`: many paced streams held at once, and many requests held
during a switch. Its upstream and its client are small servers on uvloop protocols with
httptools parsing, so that they cost little beside the proxy on a machine of few cores.

- `serve(port, name, pace_ms)`: the upstream. One ticker writes the next chunk of every open
  stream every `pace_ms` (as an engine step gives every running sequence one token at once);
  a late tick delays the ones after it (no catch-up bursts) and its gap is recorded.
  `GET /bench/stats` answers (and resets) the chunks written per stream (`"bench_stream"` in a
  request's body names it) and the ticker's own gaps.
- `client(spec)`: opens `streams` streams (spread over `ramp_s`), reads them to the end and
  prints one JSON object: per stream the chunks received, whether it ended early, the first
  chunk's time and the upstream that wrote it; every gap between two chunks of a stream.
  It writes that to a file; on stdout it says `open` when every stream has its first chunk.
- `gap_summary` and `account`: the figures from those (tested in tests/bench/test_bench_soak.py).
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
from array import array
from collections.abc import Iterable, Mapping
from typing import Any

MODEL = "bench-model"
DONE = b"data: [DONE]\n\n"


# ---------------------------------------------------------------- accounting


def percentile(ordered: list[float], q: float) -> float:
    """The `q` quantile of an already sorted list (nearest rank below)."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def gap_summary(gaps: Iterable[float], pace_s: float) -> dict[str, Any]:
    """Inter-chunk gaps (seconds) against the pacing: p50/p99/max in ms and the gaps longer
    than 10x the pacing (and than 2x)."""
    ordered = sorted(gaps)
    return {
        "gaps": len(ordered),
        "gap_p50_ms": round(percentile(ordered, 0.5) * 1e3, 2),
        "gap_p99_ms": round(percentile(ordered, 0.99) * 1e3, 2),
        "gap_max_ms": round(ordered[-1] * 1e3, 2) if ordered else 0.0,
        "gaps_over_2x": sum(1 for g in ordered if g > 2 * pace_s),
        "gaps_over_10x": sum(1 for g in ordered if g > 10 * pace_s),
    }


def account(
    sent: Mapping[str, int], received: Mapping[str, int], ended: Iterable[str], expected: int
) -> dict[str, Any]:
    """Chunks written upstream against those a client read, per stream: lost = sent - received
    (a stream the upstream never saw counts `expected` as sent); streams that ended early."""
    ended = set(ended)
    names = set(received) | set(sent)
    lost = {s: sent.get(s, expected) - received.get(s, 0) for s in names}
    return {
        "streams": len(names),
        "chunks_sent": sum(sent.get(s, expected) for s in names),
        "chunks_received": sum(received.get(s, 0) for s in names),
        "chunks_lost": sum(lost.values()),
        "streams_with_loss": sum(1 for n in lost.values() if n),
        "streams_short": sum(1 for s in names if received.get(s, 0) < expected),
        "ended_early": len(ended),
    }


# ---------------------------------------------------------------- the upstream


class Upstream:
    """The streams one upstream process writes, and its ticker."""

    def __init__(self, name: str, pace_s: float) -> None:
        self.name, self.pace = name, pace_s
        self.streams: dict[UpstreamConnection, list[Any]] = {}  # conn -> [stream, next index, total, ids]
        self.sent: dict[str, int] = {}
        self.tick_gaps = array("d")
        self.loop = asyncio.get_running_loop()
        self.last = self.next = self.loop.time()
        self.loop.call_at(self.next + pace_s, self.tick)

    def event(self, stream: str, delta: str, extra: str = "", finish: str = "null") -> bytes:
        data = (
            f'data: {{"id":"chatcmpl-{self.name}-{stream}","object":"chat.completion.chunk","created":1,'
            f'"model":"{MODEL}","choices":[{{"index":0,"delta":{delta},"logprobs":null,'
            f'"finish_reason":{finish}{extra}}}]}}\n\n'
        ).encode()
        return b"%x\r\n%s\r\n" % (len(data), data)

    def tick(self) -> None:
        now = self.loop.time()
        if self.streams:  # the ticker's own lateness, while it has streams to write
            self.tick_gaps.append(now - self.last)
        self.last = now
        for conn, state in list(self.streams.items()):
            stream, i, total, ids = state
            text = f'{{"content":" t{i}"}}'
            conn.transport.write(self.event(stream, text, f',"token_ids":[{100 + i}]' if ids else ""))
            self.sent[stream] += 1
            state[1] = i + 1
            if i + 1 >= total:
                end = self.event(stream, "{}", finish='"length"')
                conn.transport.write(end + b"%x\r\n%s\r\n0\r\n\r\n" % (len(DONE), DONE))
                del self.streams[conn]
        self.next = max(self.next + self.pace, self.loop.time())
        self.loop.call_at(self.next, self.tick)

    def start(self, conn: UpstreamConnection, body: bytes) -> None:
        request = json.loads(body)
        stream = str(request.get("bench_stream", "?"))
        ids = request.get("return_token_ids") is True
        conn.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            + self.event(
                stream, '{"role":"assistant","content":""}', ',"prompt_token_ids":[1,2,3]' if ids else ""
            )
        )
        self.sent[stream] = 0
        self.streams[conn] = [stream, 0, int(request.get("max_tokens", 16)), ids]

    def stats(self) -> dict[str, Any]:
        out = {"sent": self.sent, "ticks": gap_summary(self.tick_gaps, self.pace)}
        self.sent, self.tick_gaps = {}, array("d")
        return out


class UpstreamConnection(asyncio.Protocol):
    """One connection to the upstream: keep-alive requests, one at a time."""

    def __init__(self, upstream: Upstream) -> None:
        import httptools

        self.upstream = upstream
        self.parser = httptools.HttpRequestParser(self)
        self.url, self.body = b"", bytearray()
        self.transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.upstream.streams.pop(self, None)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except Exception:
            self.transport.close()

    def on_message_begin(self) -> None:
        self.url, self.body = b"", bytearray()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        path = self.url.split(b"?", 1)[0]
        method = self.parser.get_method()
        if method == b"POST" and path == b"/v1/chat/completions":
            self.upstream.start(self, bytes(self.body))
            return
        if path == b"/health":
            self.reply(b"")
        elif path == b"/v1/models":
            self.reply(json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode())
        elif path == b"/bench/stats":
            self.reply(json.dumps(self.upstream.stats()).encode())
        else:
            self.reply(b'{"error":"not found"}', b"404 Not Found")

    def reply(self, body: bytes, status: bytes = b"200 OK") -> None:
        head = b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % (
            status,
            len(body),
        )
        self.transport.write(head + body)


def serve(port: int, name: str, pace_ms: float) -> None:
    """Run the upstream on 127.0.0.1:`port` until killed."""
    import uvloop

    async def main() -> None:
        upstream = Upstream(name, pace_ms / 1000)
        server = await asyncio.get_running_loop().create_server(
            lambda: UpstreamConnection(upstream), "127.0.0.1", port, backlog=4096
        )
        await server.serve_forever()

    uvloop.run(main())


# ---------------------------------------------------------------- the client


class ClientStream(asyncio.Protocol):
    """One streamed chat completion read to its end: its chunks, gaps, first chunk and end."""

    def __init__(self, gaps: array[float], done: asyncio.Future[None]) -> None:
        import httptools

        self.gaps, self.done = gaps, done
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.received = 0
        self.started = time.monotonic()  # when the connection was asked for
        self.first = 0.0  # monotonic time of the first chunk
        self.last = 0.0
        self.source = ""  # the upstream's name, from the first chunk's id
        self.complete = False  # [DONE] seen and the response ended
        self.seen_done = False
        self.error = ""
        self.pending = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except Exception as err:
            self.error = f"parse: {err}"
            self.transport.close()  # type: ignore[union-attr]

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        now = time.monotonic()
        events = (self.pending + body).split(b"\n\n")
        self.pending = events.pop()
        for event in events:
            if event.startswith(b"data: {") and b'"content":" t' in event:
                if self.received:
                    self.gaps.append(now - self.last)
                else:
                    self.first = now
                    start = event.find(b'"id":"chatcmpl-') + 15
                    self.source = event[start : event.find(b"-", start)].decode(errors="replace")
                self.last = now
                self.received += 1
            elif event == b"data: [DONE]":
                self.seen_done = True

    def on_message_complete(self) -> None:
        self.complete = self.seen_done and self.status == 200
        self.transport.close()  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.complete and not self.error:
            self.error = f"closed after {self.received} chunks (status {self.status})" + (
                f": {exc}" if exc else ""
            )
        if not self.done.done():
            self.done.set_result(None)


async def _client(spec: dict[str, Any]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    host, port = spec["host"], int(spec["port"])
    n, chunks, ramp = int(spec["streams"]), int(spec["chunks"]), float(spec["ramp_s"])
    gaps: array[float] = array("d")
    streams: dict[str, ClientStream] = {}
    first_seen = asyncio.Event()

    async def one(k: int) -> None:
        await asyncio.sleep(ramp * k / n)
        name = f"{spec['prefix']}-{k}"
        body = json.dumps(
            {
                "model": MODEL,
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": chunks,
                "stream": True,
                "bench_stream": name,
            }
        ).encode()
        done: asyncio.Future[None] = loop.create_future()
        proto = ClientStream(gaps, done)
        streams[name] = proto
        try:
            await loop.create_connection(lambda: proto, host, port)
        except OSError as err:
            proto.error = f"connect: {err}"
            return
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode()
        proto.transport.write(head + body)  # type: ignore[union-attr]
        await done

    async def watch_open() -> None:  # says on stdout when every stream has its first chunk (or ended)
        while len(streams) < n or any(not s.received and not s.error for s in streams.values()):
            await asyncio.sleep(0.05)
        print("open", round(time.monotonic(), 4), flush=True)
        first_seen.set()

    started = time.monotonic()
    watcher = loop.create_task(watch_open())
    tasks = [loop.create_task(one(k)) for k in range(n)]
    _, late = await asyncio.wait(tasks, timeout=float(spec.get("timeout_s", 3600)))
    for task in late:  # a stream still open at the timeout ends early
        task.cancel()
    for open_ in streams.values():
        transport = open_.transport
        if not open_.complete and not open_.error and transport is not None and not transport.is_closing():
            open_.error = f"still open after {spec.get('timeout_s', 3600)} s ({open_.received} chunks)"
            transport.close()
    if not first_seen.is_set():
        watcher.cancel()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "seconds": round(time.monotonic() - started, 2),
        "client_cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "gaps": gap_summary(gaps, float(spec["pace_ms"]) / 1000),
        "streams": {
            name: {
                "status": s.status,
                "received": s.received,
                "first": round(s.first, 6),
                "first_after_s": round(s.first - s.started, 4) if s.first else None,
                "span_s": round(s.last - s.first, 4),
                "source": s.source,
                "ended_early": "" if s.complete and s.received >= chunks else (s.error or "short"),
            }
            for name, s in streams.items()
        },
    }


def client(spec: dict[str, Any]) -> None:
    """Run the client for `spec` (host, port, streams, chunks, pace_ms, ramp_s, prefix,
    timeout_s) and write its JSON result to the file `spec["out"]` (a pipe's 64 KiB would cut it)."""
    import uvloop

    result = uvloop.run(_client(spec))
    with open(spec["out"], "w") as out:
        json.dump(result, out)
