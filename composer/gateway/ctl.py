"""`python3 -m composer.gateway.ctl METHOD PATH [BODY]`: one request to the control socket.

Runs inside the gateway container (the host reaches it with `docker exec`, so control access
is Docker access) and forwards the request as it is (a route of `control.VERBS`; BODY is a
JSON object, e.g. `POST /drain '{"timeout_s": 60}'`), then prints the reply, one JSON object.
Exit 0 with the reply; 1 with `{"error": ...}` when the gateway refuses or cannot be reached;
2 for bad usage.

`tether --owner NAME` reads its stdin until it closes, then releases every hold of NAME: a swap
keeps one open (a `docker exec` with stdin attached) so its holds end when its process dies.
`session --owner NAME` is a tether that also forwards requests: it prints `{"session": NAME,
"requests": true}`, then reads `{"id": N, "method": M, "path": P, "body": {...}}` lines and
prints `{"id": N, "code": EXIT, "reply": {...}}` lines as they finish (each on its own thread).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
from typing import Any

import httpx

from composer.gateway.config import DEFAULT_CONTROL_SOCKET

USAGE = (
    "usage: composer.gateway.ctl [--socket PATH] METHOD PATH [BODY]\n"
    "       composer.gateway.ctl [--socket PATH] tether|session --owner NAME"
)
METHODS = ("GET", "POST", "PUT")
TETHER_DETAIL = "the swap that held ended without releasing its hold (its process died)"


class Usage(ValueError):
    """Bad arguments (exit 2)."""


def request(method: Any, path: Any, body: Any = None) -> tuple[str, str, dict[str, Any] | None]:
    """A checked request: (METHOD, /path, JSON object or None); Usage when it is not one."""
    method = method.upper() if isinstance(method, str) else method
    if method not in METHODS or not isinstance(path, str) or not path.startswith("/"):
        raise Usage(
            f"{method!r} {path!r} is not a request; allowed: GET, POST or PUT, then a path starting with '/'"
        )
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError as err:
            raise Usage(f"the body is not JSON: {err}") from err
    if body is not None and not isinstance(body, dict):
        raise Usage("the body must be a JSON object")
    return method, path, body


@functools.cache
def _client(socket_path: str) -> httpx.Client:
    """One client per control socket for this process; `verify=False`: no CA bundle is read
    (about 50 ms per client) for plain HTTP over a Unix socket."""
    transport = httpx.HTTPTransport(uds=socket_path, verify=False)
    return httpx.Client(
        transport=transport, base_url="http://gateway", timeout=httpx.Timeout(3700.0), verify=False
    )


def call(socket_path: str, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
    """One request to the control socket: (HTTP status, decoded JSON)."""
    reply = _client(socket_path).request(method, path, json=body)
    return reply.status_code, reply.json()


def forward(socket_path: str, method: Any, path: Any, body: Any = None) -> tuple[int, dict[str, Any]]:
    """One request, as `main` and a session line run it: (exit code, reply)."""
    try:
        status, reply = call(socket_path, *request(method, path, body))
    except Usage as err:
        return 2, {"error": str(err)}
    except (httpx.HTTPError, OSError, ValueError) as err:
        return 1, {"error": f"control socket {socket_path}: {type(err).__name__}: {err}"}
    if not isinstance(reply, dict):
        return 1, {"error": f"unexpected reply: {reply!r}"[:300]}
    return (0 if status < 400 else 1), reply


def tether_release(socket_path: str, owner: str) -> dict[str, Any]:
    """Release every hold whose owner is `owner` (what a closed tether or session does)."""
    _, state = call(socket_path, "GET", "/state", None)
    released: list[str] = []
    for hold in state.get("holds", []) if isinstance(state, dict) else []:
        if hold.get("owner") == owner:
            body = {"id": hold["id"], "ok": False, "detail": TETHER_DETAIL}
            status, reply = call(socket_path, "POST", "/release", body)
            if status < 400:
                released += reply.get("released", [])
    return {"released": released}


def session(socket_path: str, owner: str, requests: bool = True) -> dict[str, Any]:
    """Forward stdin's request lines (none for a plain tether); at its end, release `owner`'s holds."""
    out = threading.Lock()

    def write(message: dict[str, Any]) -> None:
        with out:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def answer(line: bytes) -> None:
        try:
            command = json.loads(line)
            ident, method, path = command.get("id"), command["method"], command["path"]
        except (ValueError, KeyError, AttributeError) as err:
            write({"id": None, "code": 2, "reply": {"error": f"bad request line: {err}"}})
            return
        code, reply = forward(socket_path, method, path, command.get("body"))
        write({"id": ident, "code": code, "reply": reply})

    if requests:
        write({"session": owner, "requests": True})
    for line in iter(sys.stdin.buffer.readline, b""):
        if requests and line.strip():
            threading.Thread(target=answer, args=(line,), daemon=True).start()
    return tether_release(socket_path, owner)


def _owner(args: list[str]) -> str | None:
    """OWNER of `tether|session --owner OWNER` (or `--owner=OWNER`); None for anything else."""
    if args[:1] not in (["tether"], ["session"]):
        return None
    if len(args) == 2 and args[1].startswith("--owner="):
        return args[1].removeprefix("--owner=")
    return args[2] if len(args) == 3 and args[1] == "--owner" else None


def _usage(problem: str) -> int:
    print(f"{USAGE}\ncomposer.gateway.ctl: error: {problem}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Forward one request (or run a tether or session); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    socket_path = os.environ.get("GATEWAY_CONTROL_SOCKET") or DEFAULT_CONTROL_SOCKET
    if args[:1] == ["--socket"] and len(args) > 1:
        socket_path, args = args[1], args[2:]
    owner = _owner(args)
    if owner is not None:
        try:
            print(json.dumps(session(socket_path, owner, requests=args[0] == "session")))
        except (httpx.HTTPError, OSError, ValueError) as err:
            print(json.dumps({"error": f"control socket {socket_path}: {type(err).__name__}: {err}"}))
            return 1
        return 0
    if len(args) not in (2, 3):
        return _usage(f"{' '.join(args) or 'nothing'} is not a request")
    code, reply = forward(socket_path, *args)
    if code == 2:
        return _usage(reply["error"])
    print(json.dumps(reply))
    return code


if __name__ == "__main__":
    sys.exit(main())
