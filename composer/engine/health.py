"""Readiness probe: /health 200, /v1/models lists the served name, a 1-token completion."""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for the probes' clients: building one (reading the CA bundle) costs
    about 25 ms per `httpx.Client`, on a swap's critical path. It never skips verification."""
    return httpx.create_ssl_context()


@dataclass(frozen=True)
class Readiness:
    """One probe result. `fatal` means waiting longer will not help."""

    ready: bool
    step: str
    detail: str = ""
    fatal: bool = False


def base_url(bind_address: str, port: int) -> str:
    """Where the API answers from this host; on a remote engine (a Docker context or
    DOCKER_HOST over tcp or ssh), its host name stands for a wildcard or loopback address."""
    from composer.engine.client import engine_address

    host = "127.0.0.1" if bind_address in {"", "0.0.0.0", "*"} else bind_address
    if host == "::":
        host = "::1"
    remote = engine_address()
    if remote and (host in {"127.0.0.1", "::1"} or host.startswith("127.")):
        host = remote
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


NOT_A_READINESS_STATE = (
    httpx.LocalProtocolError,
    httpx.UnsupportedProtocol,
    httpx.InvalidURL,
    httpx.CookieConflict,
    UnicodeError,
)
"""Errors in building a request: they say nothing about the server, and waiting longer
cannot change them (a key with characters a header cannot carry, a bad URL)."""


def probe(client: httpx.Client, url: str, served_name: str, api_key: str | None) -> Readiness:
    """Check the three readiness steps in order; stop at the first that is not yet met. A
    request that cannot be built or sent (NOT_A_READINESS_STATE) is fatal at once."""
    try:
        return _probe(client, url, served_name, api_key)
    except NOT_A_READINESS_STATE as err:  # its text may quote the header: only its type is shown
        return Readiness(
            False,
            "request",
            f"the probe request cannot be built or sent ({type(err).__name__}): the API key or the "
            "URL holds characters an HTTP request cannot carry",
            fatal=True,
        )


def _transport_said(err: httpx.TransportError) -> str:
    """A connection failure in words."""
    if isinstance(err, httpx.TimeoutException):
        return "timed out"
    if isinstance(err, httpx.ConnectError):
        return "connection refused"
    return "connection closed"


def _reply_said(err: Exception) -> str:
    """What went wrong with a reply, in words (no exception names or reprs)."""
    if isinstance(err, httpx.HTTPStatusError):
        return f"answered {err.response.status_code} {err.response.reason_phrase}".rstrip()
    if isinstance(err, httpx.TransportError):
        return _transport_said(err)
    if isinstance(err, ValueError):
        return "the answer is not JSON"
    return "the answer lacks the expected fields"


def _probe(client: httpx.Client, url: str, served_name: str, api_key: str | None) -> Readiness:
    # Built first, so a key a header cannot carry fails before the server is even up.
    headers = httpx.Headers({"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        health = client.get(f"{url}/health")
    except NOT_A_READINESS_STATE:
        raise
    except httpx.TransportError as err:
        return Readiness(False, "health", f"not listening yet ({_transport_said(err)})")
    if health.status_code == 403:  # only the gateway answers 403 here: the probe token is dead
        return Readiness(
            False,
            "health",
            "/health answered 403: the gateway refused the swap's probe token (its hold ended)",
            fatal=True,
        )
    if health.status_code != 200:
        return Readiness(False, "health", f"/health answered {health.status_code}")
    try:
        models = client.get(f"{url}/v1/models", headers=headers)
        if models.status_code == 401:
            return Readiness(False, "models", "/v1/models refused the API key (401)", fatal=True)
        models.raise_for_status()
        served = [m.get("id") for m in models.json().get("data", [])]
    except NOT_A_READINESS_STATE:
        raise
    except (httpx.HTTPError, ValueError, AttributeError) as err:
        return Readiness(False, "models", f"/v1/models failed: {_reply_said(err)}")
    if served_name not in served:
        return Readiness(
            False,
            "models",
            f"the server serves {', '.join(map(str, served)) or 'no model'}, not the expected name "
            f"'{served_name}'",
            fatal=True,
        )
    try:
        completion = client.post(
            f"{url}/v1/completions",
            headers=headers,
            json={"model": served_name, "prompt": "ping", "max_tokens": 1, "temperature": 0},
        )
        completion.raise_for_status()
        completion.json()["choices"][0]
    except NOT_A_READINESS_STATE:
        raise
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as err:
        return Readiness(False, "completion", f"a 1-token completion failed: {_reply_said(err)}")
    return Readiness(True, "ready")
