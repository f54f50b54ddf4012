"""The gateway's hop: what each forwarded response carries, and how its bytes go out."""

from __future__ import annotations

import socket
import time

from .conftest import KEY

AUTH = {"Authorization": f"Bearer {KEY}"}


def test_client_connections_send_without_delay(gateway) -> None:
    """An answer written in parts (head, body, end) must not wait on the client's delayed ACK:
    the gateway's accepted sockets have TCP_NODELAY (its listener is made with proto 0, so the
    event loop does not set it)."""
    registry = gateway.server.protocol.registry
    with socket.create_connection(("127.0.0.1", gateway.port)):
        deadline = time.monotonic() + 10
        while not registry.idle:
            assert time.monotonic() < deadline, "the connection was never registered"
            time.sleep(0.01)
        sock = next(iter(registry.idle)).transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
