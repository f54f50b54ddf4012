"""Whether the gateway answers through the port Docker publishes on the host.

Docker's forwarding (its userland proxy, or iptables rules) can vanish while the container
runs on: a dead proxy leaves "connection refused", flushed rules a port that accepts and
never answers. So the gateway is probed end to end (`GET /gateway/health`, no key). The
publication is `dead` when refused, or silent while the gateway answers on its own container
address (a local engine's); any other failure is only `answers = False`.
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
    "the published port does not answer: the gateway container is up but Docker's forwarding "
    "to it (its port proxy or its iptables rules) is gone; "
    "`compose-spec up --recreate-gateway` (it recreates the port holder too)"
)
HEALTH_PATH = "/gateway/health"
PROBE_TIMEOUT = httpx.Timeout(5.0, connect=1.0)


@dataclass(frozen=True)
class PublishedPort:
    """One end-to-end probe of the gateway through its published host port."""

    url: str
    answers: bool
    dead: bool = False  # it runs but Docker's forwarding to it is gone
    detail: str = ""
    silent: bool = False  # connected, then no answer in time (no forwarding, or a busy gateway)

    def to_json(self) -> dict[str, object]:
        return {"url": self.url, "answers": self.answers, "dead": self.dead, "detail": self.detail}


def published_address(container: Container, stack: Stack) -> tuple[str, int]:
    """The host address and port Docker publishes the container's API on (its own record
    first, then the stack's settings)."""
    from composer.engine.containers import network_owner

    ports = (network_owner(container).attrs.get("NetworkSettings") or {}).get("Ports") or {}
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
        return PublishedPort(
            url, False, detail=f"no answer through the port ({type(err).__name__})", silent=True
        )
    if reply.status_code != 200:
        return PublishedPort(url, False, detail=f"{HEALTH_PATH} answered {reply.status_code}")
    return PublishedPort(url, True)


def container_addresses(container: Container) -> list[str]:
    """The gateway's own API addresses on its networks, where this host reaches them (a local
    engine's bridges); none for a remote engine."""
    from composer.engine.client import engine_address
    from composer.engine.containers import network_owner

    if engine_address():
        return []
    networks = (network_owner(container).attrs.get("NetworkSettings") or {}).get("Networks") or {}
    found = (settings.get("IPAddress") for settings in networks.values() if isinstance(settings, dict))
    return [base_url(address, CONTAINER_PORT) for address in found if address]


def probe_published(container: Container, stack: Stack) -> PublishedPort:
    """Probe the gateway through its published host port (a refusal is asked twice more; a
    silence already waited its read timeout)."""
    host, port = published_address(container, stack)
    url = base_url(host, port)

    def attempt() -> PublishedPort:
        found = _probe_once(url)
        if found.dead:
            raise Pending(found.detail, result=found)  # the last refusal is the answer
        return found

    found = retry.published_refusal()(attempt)
    if found.silent and any(_probe_once(u).answers for u in container_addresses(container)):
        return PublishedPort(url, False, dead=True, detail=f"{found.detail}; the gateway answers inside")
    return found


ANSWER_TIMEOUT = 60.0  # seconds a (re)started gateway has to answer through the published port


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
