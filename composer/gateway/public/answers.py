"""The gateway's own answers, in one envelope: OpenAI's error shape, as vLLM answers.

Every answer the gateway makes itself on the public port (refusals, holds that time out, a
failed switch, a cut or stalled stream) is `{"error": {"message", "type", "param", "code"}}`
with the reason in `message`, so the official SDKs raise their typed errors
(`RateLimitError` for 429, `InternalServerError` for 503, ...) and show the reason.
`Retry-After` goes with the answers where waiting helps (429, 503).

A stream already under way cannot change its status: it ends with `sse_error()`, an SSE
`data:` event carrying the same envelope, then `data: [DONE]`.
"""

from __future__ import annotations

import json

from starlette.types import Send

# An ASGI response start with this key true may go out with its body, in one write (`limits`).
DEFER_HEAD = "gateway.defer_head"

# The `type` of each status, as vLLM and the OpenAI SDK name them.
ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    429: "RateLimitError",
    431: "BadRequestError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}


def error_bytes(status: int, message: str) -> bytes:
    """The gateway's error answer for `status`, in the OpenAI shape vLLM uses (JSON bytes)."""
    error = {"message": message, "type": ERROR_TYPES.get(status, "Error"), "param": None, "code": status}
    return json.dumps({"error": error}).encode()


async def send_error(send: Send, status: int, message: str, retry_after: int | None = None) -> None:
    """Answer with the error envelope (and `Retry-After` when `retry_after` is given)."""
    payload = error_bytes(status, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(max(1, int(retry_after))).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers, DEFER_HEAD: True})
    await send({"type": "http.response.body", "body": payload, "more_body": False})


def sse_error(status: int, message: str) -> bytes:
    """The end of a stream the gateway ends itself: an error event, then `[DONE]`."""
    return b"data: " + error_bytes(status, message) + b"\n\ndata: [DONE]\n\n"
