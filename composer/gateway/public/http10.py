"""Answers to HTTP/1.0 clients in HTTP/1.0: uvicorn writes an `HTTP/1.1` status line and
chunks a body of unknown length, which an HTTP/1.0 client cannot read.

`Http10Cycle` (set on the request cycle of an HTTP/1.0 request by the public port's
protocol, `limits`) writes an `HTTP/1.0` status line and `connection: close`, and sends a
body without `content-length` (a stream) as it comes, never chunked: its end is the close.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle


class _HeadWriter:
    """The transport for the head's one write: its status line says HTTP/1.0."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport

    def write(self, data: bytes) -> None:
        if data.startswith(b"HTTP/1.1 "):
            data = b"HTTP/1.0" + data[8:]
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class Http10Cycle(RequestResponseCycle):
    """The request cycle of an HTTP/1.0 request (set with `cycle.__class__ = Http10Cycle`)."""

    until_close = False  # a body of unknown length, ended by closing the connection

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            headers = list(message.get("headers", []))
            names = {name.lower() for name, _ in headers}
            if (
                b"content-length" not in names
                and self.scope["method"] != "HEAD"
                and message["status"] not in (204, 304)
            ):
                self.until_close = True
                self.chunked_encoding = False  # uvicorn adds no transfer-encoding
                headers = [(k, v) for k, v in headers if k.lower() != b"transfer-encoding"]
            self.keep_alive = False
            transport = self.transport
            self.transport = cast(asyncio.Transport, _HeadWriter(transport))  # duck-typed
            try:
                await super().send({**message, "headers": headers})
            finally:
                self.transport = transport
            return
        if self.until_close and message["type"] == "http.response.body" and not self.response_complete:
            if self.flow.write_paused and not self.disconnected:
                await self.flow.drain()
            if self.disconnected:
                return
            body = message.get("body", b"")
            if body:
                self.transport.write(body)
            if not message.get("more_body", False):
                self.response_complete = True
                self.message_event.set()
                self.transport.close()
                self.on_response()
            return
        await super().send(message)
