"""The first look at every request on the public port, before any route or key decision.

`screen()` computes the request's canonical path once and writes it into the scope
(`path` and `raw_path` both hold it from then on, so the own paths, the allow-list, the key
check and the forward read the same value), and refuses with 400 what is ambiguous: a path
that is not already canonical (`paths.canonical_path`) and a request with more than one
`Authorization` header (which one would count is up to each server on the way).
"""

from __future__ import annotations

from starlette.types import Scope

from composer.gateway.public.paths import BadPath, canonical_path
from composer.gateway.routing.gate import Refused as Refusal


def screen(scope: Scope) -> None:
    """Canonicalise `scope`'s path in place; raise `Refusal` (`gate.Refused`, 400) when ambiguous."""
    try:
        path = canonical_path(scope["raw_path"])
    except BadPath as err:
        raise Refusal("bad_path", 400, f"invalid request path: {err}") from None
    scope["path"] = path
    scope["raw_path"] = path.encode("ascii")
    seen = False
    for name, _ in scope["headers"]:
        if name == b"authorization":
            if seen:
                raise Refusal("duplicate_authorization", 400, "more than one Authorization header")
            seen = True
