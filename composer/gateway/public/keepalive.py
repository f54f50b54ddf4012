"""Keep-alive for held streaming requests: a live connection while the model is not ready.

A `stream: true` request that has waited `hold_keepalive` seconds gets the response headers
(200, `text/event-stream`) and then an SSE comment line every `hold_keepalive` seconds, so
clients and proxies (nginx's 60 s read timeout) see a live connection through a cold start.
Once the headers are out, a later success goes on as it is and an error becomes an SSE error
event in OpenAI's shape followed by `[DONE]`. Other requests are answered as without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable
from typing import Any, TypeVar

from starlette.types import Message, Send

from composer.gateway.public.answers import sse_error
from composer.gateway.public.bodies import MAX_BODY  # larger bodies are not parsed for `stream`

T = TypeVar("T")

COMMENT = b": held by the gateway until the model is ready\n\n"
HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # nginx: pass the comments on at once
]


class HeldStream:
    """One request's response while it may be held; `send` replaces the request's `send`."""

    def __init__(self, send: Send, interval: float, body: bytes) -> None:
        self._send = send
        self.interval = interval
        self._body = body
        self._wanted: bool | None = None
        self.started = False  # the headers went out: later answers go into the open stream
        self._status = 200
        self._error: list[bytes] = []

    def wanted(self) -> bool:
        """True when the body is a JSON object with `"stream": true` (read once, on its first
        wait; larger bodies than `MAX_BODY` say no)."""
        if self._wanted is None:
            body, self._wanted = self._body, False
            if b'"stream"' in body and len(body) <= MAX_BODY:
                with contextlib.suppress(ValueError, RecursionError):
                    payload = json.loads(body)
                    self._wanted = isinstance(payload, dict) and payload.get("stream") is True
        return self._wanted

    async def wait(self, waiting: Awaitable[T]) -> T:
        """Await `waiting`, with the headers and a comment every interval while it runs."""
        if not self.wanted():
            return await waiting
        task = asyncio.ensure_future(waiting)
        try:
            while not (await asyncio.wait({task}, timeout=self.interval))[0]:
                if not self.started:
                    self.started = True
                    await self._send({"type": "http.response.start", "status": 200, "headers": HEADERS})
                await self._send({"type": "http.response.body", "body": COMMENT, "more_body": True})
            return task.result()
        finally:
            if not task.done():
                task.cancel()

    async def send(self, message: Message) -> None:
        """The request's `send`: as it is until the headers went out, then into the stream."""
        if not self.started:
            await self._send(message)
            return
        if message["type"] == "http.response.start":
            self._status = message["status"]
            return
        if message["type"] != "http.response.body" or self._status < 400:
            await self._send(message)
            return
        self._error.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        text = _error_message(b"".join(self._error))
        await self._send(
            {"type": "http.response.body", "body": sse_error(self._status, text), "more_body": False}
        )


def _error_message(body: bytes) -> str:
    """The message of an error answer (OpenAI's shape, vLLM's older one, or its text)."""
    try:
        payload: Any = json.loads(body)
    except (ValueError, RecursionError):
        return body.decode("utf-8", "replace")[:500] or "error"
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    if isinstance(error, str):
        return error
    return json.dumps(payload)[:500]
