"""What the shared port's protections cost, and what they buy, side by side in one run.

Two in-process gateways in front of the same fake backend, both on httptools: one with the
gateway's protocol (canonical path, allow-list, head and connection limits), one on uvicorn's
plain httptools protocol (the head limits off; the screen still runs, so the request rate
ratio shows the protocol's share). Figures:

- `screen_us`: the canonicalisation and header screen of one request, in microseconds
  (a typical path and a dotted one refused);
- `rps_ratio`: keyed GET /v1/models over one keep-alive connection, requests per second,
  limited / plain (1.0 means the limits cost nothing measurable);
- `attack_keyed_ms`: the round trip of a keyed request sent while another client sends a
  16 MiB header line, with the limits and without them (the plain protocol parses it).

Usage: .venv/bin/python benchmarks/bench_gateway_limits.py [--requests N] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import statistics
import sys
import threading
import time
import timeit
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from composer.gateway.public.screen import Refusal, screen  # noqa: E402
from tests.gateway.fakes import FakeBackend, GatewayThread  # noqa: E402

KEY = "bench-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def screen_us() -> dict[str, float]:
    """Microseconds per `screen()` of a canonical path and of a refused dotted one."""
    headers = [(b"host", b"x"), (b"authorization", b"Bearer k"), (b"content-type", b"application/json")]

    def ok() -> None:
        screen({"raw_path": b"/v1/chat/completions", "headers": headers})

    def dotted() -> None:
        with contextlib.suppress(Refusal):
            screen({"raw_path": b"/v1/../sleep", "headers": headers})

    n = 100_000
    return {
        "canonical": round(min(timeit.repeat(ok, number=n, repeat=3)) / n * 1e6, 3),
        "refused": round(min(timeit.repeat(dotted, number=n, repeat=3)) / n * 1e6, 3),
    }


def rate(url: str, requests: int) -> float:
    with httpx.Client(headers=AUTH, timeout=10) as client:
        client.get(url + "/v1/models")
        started = time.perf_counter()
        for _ in range(requests):
            assert client.get(url + "/v1/models").status_code == 200
        return requests / (time.perf_counter() - started)


def keyed_during_attack(gw: GatewayThread, size: int) -> float:
    """Milliseconds of a keyed request sent while another client sends a `size` header line."""
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=60)
    started_sending = threading.Event()

    def send() -> None:
        try:
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ")
            started_sending.set()
            sock.sendall(b"a" * size + b"\r\n\r\n")
            sock.recv(100)
        except OSError:
            pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    started_sending.wait(10)
    began = time.perf_counter()
    assert httpx.get(gw.url + "/v1/models", headers=AUTH, timeout=60).status_code == 200
    took = (time.perf_counter() - began) * 1000
    sender.join(60)
    sock.close()
    return round(took, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    backend = FakeBackend().start()
    backend.state.api_key = KEY
    limited = GatewayThread(backend.url, api_key=KEY)
    plain = GatewayThread(backend.url, api_key=KEY, max_head_bytes=16 * 1024 * 1024 + 4096)
    plain.server.public.config.http = "httptools"  # uvicorn's own protocol: no head limits
    gateways = {"limited": limited.start(), "plain": plain.start()}
    try:
        for gw in gateways.values():
            gw.wait(lambda g: g.upstream.ready)
        rates: dict[str, list[float]] = {name: [] for name in gateways}
        for _ in range(3):  # alternate, so load on the host hits both alike
            for name, gw in gateways.items():
                rates[name].append(rate(gw.url, args.requests))
        attack = {name: keyed_during_attack(gw, 16 * 1024 * 1024) for name, gw in gateways.items()}
    finally:
        for gw in gateways.values():
            gw.stop()
        backend.stop()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    result = {
        "screen_us": screen_us(),
        "rps": {name: round(value) for name, value in medians.items()},
        "rps_ratio": round(medians["limited"] / medians["plain"], 3),
        "attack_keyed_ms": attack,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
