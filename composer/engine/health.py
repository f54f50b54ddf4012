"""Readiness probe: /health 200, /v1/models lists the served name, a 1-token completion."""

from __future__ import annotations

from dataclasses import dataclass

import httpx


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


def probe(client: httpx.Client, url: str, served_name: str, api_key: str | None) -> Readiness:
    """Check the three readiness steps in order; stop at the first that is not yet met."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        health = client.get(f"{url}/health")
    except httpx.TransportError as err:
        return Readiness(False, "health", f"not listening yet ({type(err).__name__})")
    if health.status_code != 200:
        return Readiness(False, "health", f"/health answered {health.status_code}")
    try:
        models = client.get(f"{url}/v1/models", headers=headers)
        if models.status_code == 401:
            return Readiness(False, "models", "/v1/models refused the API key (401)", fatal=True)
        models.raise_for_status()
        served = [m.get("id") for m in models.json().get("data", [])]
    except (httpx.HTTPError, ValueError, AttributeError) as err:
        return Readiness(False, "models", f"/v1/models failed: {err}")
    if served_name not in served:
        return Readiness(
            False,
            "models",
            f"the server serves {served!r}, not the expected name {served_name!r}",
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
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as err:
        return Readiness(False, "completion", f"a 1-token completion failed: {err}")
    return Readiness(True, "ready")
