"""Two gateways on one port, as in a replacement (the new one listens beside the old one,
SO_REUSEPORT): the old one's stop closes its listener and lets its stream finish, and no
request sent meanwhile fails; the kernel hands them all to the new one afterwards."""

from __future__ import annotations

import threading

import httpx

from .conftest import KEY

AUTH = {"Authorization": f"Bearer {KEY}"}


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
