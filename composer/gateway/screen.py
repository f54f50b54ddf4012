"""The first look at every request on the public port, before any route or key decision.

`screen()` computes the request's canonical path once and writes it into the scope
(`path` and `raw_path` both hold it from then on, so the own paths, the allow-list, the key
check and the forward read the same value), and refuses with 400 what is ambiguous: a path
that is not already canonical (`paths.canonical_path`) and a request with more than one
`Authorization` header (which one would count is up to each server on the way).
"""

from __future__ import annotations

from starlette.types import Scope, Send

from .answers import send_error
from .paths import BadPath, canonical_path


class Refusal(Exception):
    """The gateway answers the request itself with `status` and an OpenAI-style error body."""

    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason  # metrics label


def screen(scope: Scope) -> None:
    """Canonicalise `scope`'s path in place; raise `Refusal` (400) for an ambiguous request."""
    try:
        path = canonical_path(scope["raw_path"])
    except BadPath as err:
        raise Refusal(400, f"invalid request path: {err}", "bad_path") from None
    scope["path"] = path
    scope["raw_path"] = path.encode("ascii")
    seen = False
    for name, _ in scope["headers"]:
        if name == b"authorization":
            if seen:
                raise Refusal(400, "more than one Authorization header", "duplicate_authorization")
            seen = True


async def send_refusal(send: Send, refusal: Refusal) -> None:
    """Answer a `Refusal` in the gateway's error envelope."""
    await send_error(send, refusal.status, str(refusal))
