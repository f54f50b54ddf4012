"""Requests an attacker sends to the shared port: raw request targets and raw sockets.

`PATH_MATRIX` holds request targets that try to reach vLLM's dev routes (or any route off the
allow-list) past the gateway: dot segments, percent-encoded dots, slashes and letters, case,
absolute-form, `;` parameters, trailing `/`, NUL, backslashes, repeated slashes. Each must be
answered 400 or 404 by the gateway itself and reach no backend, with or without the key.
"""

from __future__ import annotations

import resource
import socket

PATH_MATRIX: tuple[tuple[str, bytes], ...] = (
    # dot segments
    ("POST", b"/x/../sleep?level=1"),
    ("POST", b"/./sleep"),
    ("POST", b"/.//sleep"),
    ("POST", b"/health/../sleep"),
    ("POST", b"/metrics/../sleep"),
    ("POST", b"/gateway/../sleep"),
    ("POST", b"/gateway/health/../../sleep"),
    ("POST", b"/v1/../sleep"),
    ("POST", b"/v1/models/../../sleep"),
    ("POST", b"/v1/./../wake_up"),
    ("POST", b"/x/../wake_up"),
    ("POST", b"/x/../collective_rpc"),
    ("POST", b"/v1/../collective_rpc"),
    ("POST", b"/sleep/."),
    ("POST", b"/sleep/x/.."),
    ("POST", b"/v1/load_lora_adapter/../../sleep"),
    # percent-encoded dots, slashes, letters
    ("POST", b"/%2e/sleep"),
    ("POST", b"/%2E/sleep"),
    ("POST", b"/x/%2e%2e/sleep"),
    ("POST", b"/x/%2E%2E/sleep"),
    ("POST", b"/x/.%2e/sleep"),
    ("POST", b"/x/%2e./sleep"),
    ("POST", b"/%2e%2e/sleep"),
    ("POST", b"/x/..%2fsleep"),
    ("POST", b"/x%2f..%2fsleep"),
    ("POST", b"/%2fsleep"),
    ("POST", b"/%2Fsleep"),
    ("POST", b"/v1%2f..%2fsleep"),
    ("POST", b"/%73leep"),
    ("POST", b"/sl%65ep"),
    ("POST", b"/wake%5fup"),
    ("POST", b"/x/%252e%252e/sleep"),
    ("POST", b"/x%5c..%5csleep"),
    ("POST", b"/sleep%00"),
    # case
    ("POST", b"/SLEEP"),
    ("POST", b"/Sleep"),
    ("POST", b"/WAKE_UP"),
    ("POST", b"/V1/load_lora_adapter"),
    # absolute-form
    ("POST", b"http://127.0.0.1/sleep"),
    ("POST", b"http://127.0.0.1/x/../sleep"),
    ("POST", b"http://evil.example/v1/../collective_rpc"),
    # ';' parameters
    ("POST", b"/sleep;level=1"),
    ("POST", b"/..;/sleep"),
    ("POST", b"/v1;/../sleep"),
    ("POST", b"/health;/../sleep"),
    # trailing '/'
    ("POST", b"/sleep/"),
    ("POST", b"/wake_up/"),
    ("POST", b"/collective_rpc/"),
    ("POST", b"/v1/unload_lora_adapter/"),
    # repeated slashes
    ("POST", b"//sleep"),
    ("POST", b"///sleep"),
    ("POST", b"//x/../sleep"),
    ("POST", b"/v1//../sleep"),
    # NUL and backslashes, raw
    ("POST", b"/sleep\x00"),
    ("POST", b"/x/..\\sleep"),
    ("POST", b"\\sleep"),
    # the dev routes as they are, and other routes off the allow-list
    ("POST", b"/sleep?level=1"),
    ("POST", b"/wake_up"),
    ("POST", b"/collective_rpc"),
    ("GET", b"/is_sleeping"),
    ("POST", b"/reset_prefix_cache"),
    ("POST", b"/v1/load_lora_adapter"),
    ("GET", b"/server_info"),
    ("GET", b"/docs"),
    ("GET", b"/openapi.json"),
)
RPC_BODY = b'{"method": "reload_weights"}'


def raw_request(
    port: int, method: str, target: bytes, headers: list[tuple[str, str]] = (), body: bytes = RPC_BODY
) -> tuple[int, bytes]:
    """Send one request exactly as given (no client-side normalisation); (status, body)."""
    head = [method.encode() + b" " + target + b" HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close"]
    head += [f"{k}: {v}".encode() for k, v in headers]
    head += [b"Content-Type: application/json", b"Content-Length: " + str(len(body)).encode()]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def raise_fd_limit(wanted: int) -> None:
    """Raise this process's open-file limit to `wanted` (at most the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def half_open(port: int, count: int) -> tuple[list[socket.socket], set[socket.socket]]:
    """`count` connections to `port`: every other one sends a head that never ends, the others
    send nothing. All of them, and the ones that send."""
    socks: list[socket.socket] = []
    slow: set[socket.socket] = set()
    for i in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        if i % 2:
            s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
            slow.add(s)
        socks.append(s)
    return socks, slow
