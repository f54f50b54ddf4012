"""Two gateways on one port, as in a replacement (the new one listens beside the old one,
SO_REUSEPORT): the old one's stop closes its listener and lets its stream finish, and no
request sent meanwhile fails; the kernel hands them all to the new one afterwards."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest

from tests.conftest import MIGRATE

from .conftest import KEY

AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(autouse=True)
def migrated_requests() -> None:
    """The kernel hands the connections a closing listener has not accepted yet to the other
    listener of the port (net.ipv4.tcp_migrate_req, which the gateway's port holder sets in
    its own network namespace); without it they are reset, and these tests would measure
    that race. Set where it can be (root; the session restores it at its end: `MIGRATE`),
    else the test is skipped."""
    try:
        if MIGRATE.read_text().strip() != "1":
            MIGRATE.write_text("1")
    except OSError as err:
        pytest.skip(f"net.ipv4.tcp_migrate_req cannot be set here: {err}")


def test_a_stopping_gateway_finishes_its_stream_while_the_new_one_takes_the_port(
    make_gateway, backend
) -> None:
    old = make_gateway()
    new = make_gateway(port=old.port)  # both listen: the kernel spreads connections over them
    body = {"model": "m", "stream": True, "chunks": 40, "interval": 0.05, "tag": "long"}
    lines: list[str] = []
    streaming = threading.Event()

    def stream() -> None:
        with httpx.Client(timeout=30, trust_env=False) as client:
            while True:  # until the stream lands on the old gateway
                with client.stream(
                    "POST", f"{old.url}/v1/chat/completions", json=body, headers=AUTH
                ) as reply:
                    if old.gateway.gate.inflight == 0:
                        continue  # the new one took it: ask again
                    streaming.set()
                    lines.extend(line for line in reply.iter_lines() if line)
                    return

    reader = threading.Thread(target=stream)
    reader.start()
    assert streaming.wait(20)
    failures: list[str] = []
    stopping = threading.Thread(target=lambda: old.stop(grace=30))
    stopping.start()
    for _ in range(40):  # new connections, one each, while the old one stops
        try:
            status = httpx.get(f"{old.url}/v1/models", headers=AUTH, timeout=10, trust_env=False).status_code
            if status != 200:
                failures.append(str(status))
        except httpx.HTTPError as err:
            failures.append(type(err).__name__)
    reader.join(30)
    stopping.join(30)
    assert failures == []
    assert lines[-1] == "data: [DONE]" and len(lines) == 41, lines[-3:]  # the stream finished whole
    assert not old.thread.is_alive() and new.thread.is_alive()
    assert httpx.get(f"{new.url}/v1/models", headers=AUTH, timeout=10, trust_env=False).status_code == 200


def test_a_connection_accepted_just_before_the_stop_is_served_and_a_silent_one_closed(make_gateway) -> None:
    """The race a replacement's probes hit: the old gateway accepted a connection, then began
    its stop before the client's request arrived. The request is served (`connection: close`),
    never cut; a connection that sends nothing is closed, and the stop ends."""
    gw = make_gateway()
    registry = gw.server.protocol.registry
    talker = socket.create_connection(("127.0.0.1", gw.port), timeout=20)
    silent = socket.create_connection(("127.0.0.1", gw.port), timeout=20)
    try:
        gw.wait(lambda _: registry.open == 2)  # both accepted, neither has sent a byte
        stopping = threading.Thread(target=lambda: gw.stop(grace=30))
        stopping.start()
        gw.wait(
            lambda _: gw.server.public.servers and not any(s.is_serving() for s in gw.server.public.servers)
        )
        talker.sendall(f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode())
        answer = b""
        while chunk := talker.recv(65536):
            answer += chunk
        head = answer.split(b"\r\n\r\n", 1)[0].lower()
        assert head.startswith(b"http/1.1 200") and b"connection: close" in head, answer[:300]
        assert silent.recv(1) == b""  # closed without a word once the grace ran out
        stopping.join(30)
        assert not gw.thread.is_alive()
    finally:
        talker.close()
        silent.close()


def test_a_keep_alive_client_sending_back_to_back_loses_nothing_when_its_gateway_stops(
    make_gateway, backend
) -> None:
    """Clients each reusing one connection for request after request, some streamed: the old
    gateway's stop never closes a connection under a request its client is sending or is
    about to send (a response that began before the stop cannot say `connection: close`), so
    every request succeeds, on the old gateway or, once it closed the connection, the new."""
    old = make_gateway()
    failures: list[str] = []
    answered: list[int] = []
    done = threading.Event()

    def client() -> None:
        with httpx.Client(timeout=30, trust_env=False) as http:
            while not done.is_set():
                stream = len(answered) % 2 == 0
                body = {"model": "m", "stream": stream, "chunks": 3, "interval": 0.01, "tag": "k"}
                try:
                    reply = http.post(f"{old.url}/v1/chat/completions", json=body, headers=AUTH)
                    if reply.status_code != 200:
                        failures.append(str(reply.status_code))
                except httpx.HTTPError as err:
                    failures.append(f"{type(err).__name__}: {err}")
                answered.append(1)

    clients = [threading.Thread(target=client) for _ in range(16)]
    for thread in clients:
        thread.start()
    old.wait(lambda _: len(answered) >= 8)  # every connection is to the old gateway, the only one
    new = make_gateway(port=old.port)
    old.stop(grace=30)
    after = len(answered)
    new.wait(lambda _: len(answered) >= after + 20)  # the clients go on, on the new gateway
    done.set()
    for thread in clients:
        thread.join(30)
    assert failures == [], failures[:5]
    assert not old.thread.is_alive() and new.thread.is_alive()
