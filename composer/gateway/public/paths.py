"""The one canonical path of a request, computed once before anything else looks at it.

`canonical_path` takes the raw path (bytes, before `?`) and returns the path the key check,
the route decision and the forward all use. A path that is not already canonical is refused
(`BadPath`, answered 400 before the key check): dot segments, encoded unreserved characters,
an encoded slash or backslash, control bytes, `;` parameters, a backslash, repeated slashes,
no leading `/`, a malformed `%`. So an accepted path is forwarded byte for byte, and no two
spellings reach the same route.
"""

from __future__ import annotations

import re

# RFC 3986 unreserved characters: their percent-encoding means the same as the character.
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Percent-encoded bytes that change how the path splits or compares: '/', '\' and controls.
_ENCODED_FORBIDDEN = frozenset({0x2F, 0x5C, 0x7F, *range(0x20)})
_PERCENT = re.compile(rb"%(.?.?)")
# Bytes never allowed raw in a path: controls, space, '\', ';' (parameters), '#', non-ASCII.
_RAW_FORBIDDEN = re.compile(rb"[\x00-\x20\x7f-\xff\\;#]")


class BadPath(ValueError):
    """The request's path is ambiguous or malformed: `str()` says why (safe to show the client)."""


def canonical_path(raw: bytes) -> str:
    """The path to check, route and forward; raises `BadPath` when `raw` is not already it."""
    if not raw.startswith(b"/"):
        raise BadPath("the request target must be an absolute path starting with '/'")
    bad = _RAW_FORBIDDEN.search(raw)
    if bad is not None:
        raise BadPath(f"the path contains a forbidden character {bad.group(0)!r}")
    for match in _PERCENT.finditer(raw):
        digits = match.group(1)
        if len(digits) != 2 or not all(c in b"0123456789abcdefABCDEF" for c in digits):
            raise BadPath("the path has a malformed percent-encoding")
        value = int(digits, 16)
        if value in _UNRESERVED:
            raise BadPath("the path percent-encodes an unreserved character (such as %2e or %41)")
        if value in _ENCODED_FORBIDDEN:
            raise BadPath("the path percent-encodes a slash, backslash or control character")
    text = raw.decode("ascii")
    if "//" in text or ("/." in text and any(part in (".", "..") for part in text.split("/"))):
        raise BadPath("the path is not in canonical form (dot segments or repeated slashes)")
    return text
