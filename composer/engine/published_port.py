"""Whether the gateway answers through the port Docker publishes on the host.

Docker forwards a published port to a container with a proxy on the host (docker-proxy,
its userland proxy). That proxy can die while the container runs on, healthy from inside:
clients then get "connection refused", and a bind test finds the port free. So the
gateway is probed end to end, `GET /gateway/health` on the published address, without the
key. A refused connection while the gateway container runs means the proxy is gone
(`dead`); any other failure (the proxy up, the gateway not listening yet) is only
`answers = False`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from composer.engine import retry
from composer.engine.health import base_url, tls_context
from composer.engine.retry import Pending
from composer.render.spec import CONTAINER_PORT

if TYPE_CHECKING:
    from docker.models.containers import Container

    from composer.stack.model import Stack

DEAD_PORT = (
    "the published port does not answer: the gateway container is up but Docker's port proxy is gone; "
    "`compose-spec up --recreate-gateway` (or restart the gateway)"
)
HEALTH_PATH = "/gateway/health"
PROBE_TIMEOUT = httpx.Timeout(5.0, connect=1.0)


@dataclass(frozen=True)
class PublishedPort:
    """One end-to-end probe of the gateway through its published host port."""

    url: str
    answers: bool
    dead: bool = False
    """The connection was refused while the container runs: Docker's proxy is gone."""
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        return {"url": self.url, "answers": self.answers, "dead": self.dead, "detail": self.detail}


def published_address(container: Container, stack: Stack) -> tuple[str, int]:
    """The host address and port Docker publishes the container's API on (its own record
    first, then the stack's settings)."""
    ports = (container.attrs.get("NetworkSettings") or {}).get("Ports") or {}
    for binding in ports.get(f"{CONTAINER_PORT}/tcp") or ():
        if binding.get("HostPort"):
            return binding.get("HostIp") or stack.bind_address, int(binding["HostPort"])
    return stack.bind_address, stack.port


def _probe_once(url: str) -> PublishedPort:
    try:
        with httpx.Client(timeout=PROBE_TIMEOUT, trust_env=False, verify=tls_context()) as client:
            reply = client.get(f"{url}{HEALTH_PATH}")
    except httpx.ConnectError as err:
        refused = "refused" in str(err).lower() or isinstance(err.__cause__, ConnectionRefusedError)
        return PublishedPort(url, False, dead=refused, detail=f"connection failed ({type(err).__name__})")
    except httpx.HTTPError as err:
        return PublishedPort(url, False, detail=f"no answer through the port ({type(err).__name__})")
    if reply.status_code != 200:
        return PublishedPort(url, False, detail=f"{HEALTH_PATH} answered {reply.status_code}")
    return PublishedPort(url, True)


def probe_published(container: Container, stack: Stack) -> PublishedPort:
    """Probe the gateway through its published host port (a refusal is asked twice more)."""
    host, port = published_address(container, stack)
    url = base_url(host, port)

    def attempt() -> PublishedPort:
        found = _probe_once(url)
        if found.dead:
            raise Pending(found.detail, result=found)  # the last refusal is the answer
        return found

    return retry.published_refusal()(attempt)


ANSWER_TIMEOUT = 60.0
"""Seconds a (re)started gateway has to answer through the published port."""


def wait_published(container: Container, stack: Stack, timeout: float = ANSWER_TIMEOUT) -> PublishedPort:
    """Probe a (re)started gateway through its published port until it answers (at most
    `timeout` s); the last probe."""
    container.reload()

    def attempt() -> PublishedPort:
        found = probe_published(container, stack)
        if not found.answers:
            raise Pending(found.detail, result=found)  # the last probe is the answer
        return found

    return retry.port_answers(timeout)(attempt)
