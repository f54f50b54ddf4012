"""The shared port under attack, in the gateway image with the real daemon and Docker's published port.

One lab for the module: the gateway (head timeout 2 s) in front of a sleep-standby simulator
with dev mode on, so its /sleep, /wake_up and /collective_rpc routes exist and would answer.
"""

from __future__ import annotations

import contextlib
import re
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from composer.gateway import GatewayControl

from .attacks import PATH_MATRIX, half_open, raise_fd_limit, raw_request
from .dockerlab import KEY, SIM_IMAGE, Lab, build_gateway_image

pytestmark = pytest.mark.docker

AUTH = {"Authorization": f"Bearer {KEY}"}
HEAD_TIMEOUT_S = 2
# The access log lines of the simulator ("GET /path HTTP/1.1" 200 OK), less the gateway's polls.
ACCESS = re.compile(r'"([A-Z]+) (\S+) HTTP/1\.[01]" \d{3}')
POLLS = {("GET", "/health"), ("GET", "/v1/models"), ("GET", "/metrics")}


@pytest.fixture(scope="module")
def lab(docker_client) -> Iterator[Lab]:
    try:
        docker_client.images.get(SIM_IMAGE)
    except Exception:
        pytest.fail(f"{SIM_IMAGE} is missing: run `make image-sim` (make test does)")
    build_gateway_image()
    lab = Lab(docker_client).start(gateway_env={"GATEWAY_HEAD_TIMEOUT": str(HEAD_TIMEOUT_S)})
    try:
        lab.start_sim("standby", env={"VLLM_SERVER_DEV_MODE": "1"}, args=("--enable-sleep-mode",))
        lab.wait_gateway()
        assert GatewayControl(lab.gateway).wait_ready(30), lab.gateway.logs().decode()[-2000:]
        yield lab
    finally:
        lab.cleanup()


def backend_requests(lab: Lab) -> list[tuple[str, str]]:
    """Every request the simulator served, but the gateway's readiness polls and /metrics."""
    log = lab.sims[0].logs().decode(errors="replace")
    return [(m.group(1), m.group(2)) for m in ACCESS.finditer(log) if (m.group(1), m.group(2)) not in POLLS]


def test_no_path_shape_reaches_the_dev_routes(lab: Lab) -> None:
    ctl = GatewayControl(lab.gateway)
    before = backend_requests(lab)
    metrics_before = httpx.get(lab.url + "/metrics", headers=AUTH, timeout=5).text
    for headers in ([], [("Authorization", f"Bearer {KEY}")]):
        for method, target in PATH_MATRIX:
            status, body = raw_request(lab.port, method, target, headers)
            assert status in (400, 404), (target, headers, status, body)
    assert backend_requests(lab) == before, "a request reached the simulator"
    metrics_after = httpx.get(lab.url + "/metrics", headers=AUTH, timeout=5).text
    for name in ("vllm:request_success_total", "vllm:engine_sleep_state"):
        assert [ln for ln in metrics_after.splitlines() if ln.startswith(name)] == [
            ln for ln in metrics_before.splitlines() if ln.startswith(name)
        ], name
    assert re.search(r'vllm:engine_sleep_state\{[^}]*sleep_state="awake"[^}]*\} 1', metrics_after)
    assert ctl.is_sleeping() is False
    r = httpx.post(lab.url + "/v1/chat/completions", json=_chat(), headers=AUTH, timeout=30)
    assert r.status_code == 200


def _chat() -> dict:
    return {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_unkeyed_flood_during_a_hold_leaves_the_keyed_request_served(lab: Lab) -> None:
    ctl = GatewayControl(lab.gateway)
    hold = ctl.hold(60, owner="swap")
    paths = ["/health", "/metrics", "/version", "/v1/models", "/sleep"]
    try:
        with httpx.Client(limits=httpx.Limits(max_connections=64), timeout=15) as client:

            def unkeyed(i: int) -> int:
                try:
                    return client.get(lab.url + paths[i % len(paths)]).status_code
                except httpx.HTTPError:
                    return 0

            with ThreadPoolExecutor(32) as pool:
                statuses = list(pool.map(unkeyed, range(300)))
        assert sorted(set(statuses)) == [401, 404, 503], statuses
        result: dict = {}

        def keyed() -> None:
            result["r"] = httpx.post(lab.url + "/v1/chat/completions", json=_chat(), headers=AUTH, timeout=60)

        t = threading.Thread(target=keyed, daemon=True)
        t.start()
        deadline = time.monotonic() + 30
        while ctl.state().held < 1:
            assert time.monotonic() < deadline, "the keyed request was not held"
            time.sleep(0.05)
    finally:
        ctl.release(hold.id)
    t.join(60)
    assert result["r"].status_code == 200


def test_a_huge_head_gets_431_while_a_keyed_request_is_served(lab: Lab) -> None:
    sock = socket.create_connection(("127.0.0.1", lab.port), timeout=30)
    answer = bytearray()
    sent_all = threading.Event()

    def read() -> None:
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                answer.extend(chunk)

    def send() -> None:
        with contextlib.suppress(OSError):
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ")
            piece = b"a" * (1024 * 1024)
            for _ in range(64):
                sock.sendall(piece)
            sock.sendall(b"\r\n\r\n")
            sent_all.set()

    threads = [threading.Thread(target=f, daemon=True) for f in (read, send)]
    for t in threads:
        t.start()
    r = httpx.post(lab.url + "/v1/chat/completions", json=_chat(), headers=AUTH, timeout=30)
    keyed_first = not sent_all.is_set()
    for t in threads:
        t.join(60)
    sock.close()
    assert r.status_code == 200
    assert bytes(answer).startswith(b"HTTP/1.1 431 "), bytes(answer[:200])
    assert keyed_first and not sent_all.is_set(), "the gateway read the whole 64 MiB head"


def test_half_open_connections_are_closed_and_the_published_port_lives(lab: Lab) -> None:
    raise_fd_limit(12000)
    socks, slow = half_open(lab.port, 2000)
    watch = selectors.DefaultSelector()
    for s in socks:
        watch.register(s, selectors.EVENT_READ)
    pending = set(socks)
    served = 0
    deadline = time.monotonic() + 180  # a bound for a gateway that never closes them
    try:
        with httpx.Client() as client:
            while pending:
                assert time.monotonic() < deadline, f"{len(pending)} half-open connections still open"
                r = client.post(lab.url + "/v1/chat/completions", json=_chat(), headers=AUTH, timeout=30)
                assert r.status_code == 200
                served += 1
                for key, _ in watch.select(0.2):
                    s = key.fileobj
                    watch.unregister(s)
                    try:
                        data = s.recv(65536)
                    except ConnectionResetError:
                        data = b""
                    # through Docker's proxy a refused head may arrive as a plain close
                    assert data == b"" or data.startswith(b"HTTP/1.1 408 "), data[:100]
                    pending.discard(s)
                    slow.discard(s)
                for s in slow:
                    with contextlib.suppress(OSError):
                        s.sendall(b"X-Slow: 1\r\n")
    finally:
        watch.close()
        for s in socks:
            s.close()
    assert served >= 2
    # the published port still answers, and the gateway counted what it closed
    assert httpx.get(lab.url + "/v1/models", headers=AUTH, timeout=10).status_code == 200
    metrics = httpx.get(lab.url + "/gateway/metrics", timeout=10).text
    closed = sum(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("gateway_connections_closed_total{")
    )
    assert closed >= 2000, metrics
