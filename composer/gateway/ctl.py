"""`python3 -m composer.gateway.ctl VERB ...`: talk to the control socket, print one JSON object.

Runs inside the gateway container (the host reaches it with `docker exec`, so control access
is Docker access). Exit 0 with the reply on stdout; 1 with `{"error": ...}` when the gateway
refuses or cannot be reached; 2 for bad usage.

    state
    hold [--lease S] [--owner NAME] [--probe-token T]
    renew ID [--lease S]
    release [ID] [--serving VARIANT] [--failed] [--detail TEXT]
    drain [--timeout S] [--lease S] [--owner NAME] [--wait S] [--probe-token T] [--target VARIANT]
    drain-wait ID [--wait S]
    route URL
    wait-ready [--timeout S]
    backend METHOD PATH [--query NAME=VALUE ...] [--json BODY] [--timeout S]
    demand [--wait S]
    serving [VARIANT] [--demand ID] [--failed] [--detail TEXT]
    upstreams JSON                      (the live set: [{"name", "variant", "url"}, ...])
    drain-upstream NAME [--wait S]
    tether --owner NAME
    session --owner NAME

`tether` reads its stdin until it closes, then releases every hold of OWNER: a swap keeps
one open (a long-lived `docker exec` with stdin attached) for as long as it holds, so its
holds end as soon as its process dies, whatever the lease.

`session` is a tether that also runs verbs: it prints `{"session": OWNER}` once, then reads
one JSON object per line, `{"id": N, "argv": [VERB, ARG, ...]}` (the arguments of any verb
above but `tether` and `session`), and prints one line per command, `{"id": N, "code": EXIT,
"reply": {...}}`, in the order they finish (each runs on its own thread, so a renewal never
waits behind a long wait). A swap runs its whole control channel through one `docker exec`
this way; at EOF it releases OWNER's holds like `tether`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import threading
from typing import Any

import httpx

from .config import DEFAULT_CONTROL_SOCKET


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="composer.gateway.ctl", description="Gateway control channel client")
    p.add_argument("--socket", default=os.environ.get("GATEWAY_CONTROL_SOCKET") or DEFAULT_CONTROL_SOCKET)
    sub = p.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    sub.add_parser("state")
    h = sub.add_parser("hold")
    h.add_argument("--lease", type=float)
    h.add_argument("--owner", default="")
    h.add_argument("--probe-token", default="")
    r = sub.add_parser("renew")
    r.add_argument("id")
    r.add_argument("--lease", type=float)
    rel = sub.add_parser("release")
    rel.add_argument("id", nargs="?")
    rel.add_argument("--serving")
    rel.add_argument("--failed", action="store_true")
    rel.add_argument("--detail")
    d = sub.add_parser("drain")
    d.add_argument("--timeout", type=float)
    d.add_argument("--lease", type=float)
    d.add_argument("--owner", default="")
    d.add_argument("--probe-token", default="")
    d.add_argument("--wait", type=float)
    d.add_argument("--target")
    dw = sub.add_parser("drain-wait")
    dw.add_argument("id")
    dw.add_argument("--wait", type=float, default=25.0)
    ro = sub.add_parser("route")
    ro.add_argument("upstream")
    w = sub.add_parser("wait-ready")
    w.add_argument("--timeout", type=float, default=25.0)
    b = sub.add_parser("backend")
    b.add_argument("method")
    b.add_argument("path")
    b.add_argument("--query", action="append", default=[], metavar="NAME=VALUE")
    b.add_argument("--json", dest="json_body")
    b.add_argument("--timeout", type=float)
    dm = sub.add_parser("demand")
    dm.add_argument("--wait", type=float, default=25.0)
    up = sub.add_parser("upstreams")
    up.add_argument("json_list", metavar="JSON", help='the live set: [{"name", "variant", "url"}, ...]')
    du = sub.add_parser("drain-upstream")
    du.add_argument("name")
    du.add_argument("--wait", type=float, default=25.0)
    sv = sub.add_parser("serving")
    sv.add_argument("variant", nargs="?")
    sv.add_argument("--demand")
    sv.add_argument("--failed", action="store_true")
    sv.add_argument("--detail", default="")
    for verb in ("tether", "session"):
        t = sub.add_parser(verb)
        t.add_argument("--owner", required=True)
    return p


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def request_for(args: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None]:
    """(method, path, JSON body) for the parsed verb; ValueError on a bad argument."""
    verb = args.verb
    if verb == "state":
        return "GET", "/state", None
    if verb == "hold":
        body = {"lease_s": args.lease, "owner": args.owner, "probe_token": args.probe_token or None}
        return "POST", "/hold", _drop_none(body)
    if verb == "renew":
        return "POST", "/renew", _drop_none({"id": args.id, "lease_s": args.lease})
    if verb == "release":
        body = {"id": args.id, "serving": args.serving, "detail": args.detail}
        if args.serving or args.failed or args.detail is not None:
            body["ok"] = not args.failed
        return "POST", "/release", _drop_none(body)
    if verb == "drain":
        body = {
            "timeout_s": args.timeout,
            "lease_s": args.lease,
            "owner": args.owner,
            "wait_s": args.wait,
            "probe_token": args.probe_token or None,
            "target": args.target or None,
        }
        return "POST", "/drain", _drop_none(body)
    if verb == "drain-wait":
        return "GET", f"/drain/{args.id}?wait_s={args.wait}", None
    if verb == "route":
        return "POST", "/route", {"upstream": args.upstream}
    if verb == "wait-ready":
        return "POST", "/wait-ready", {"timeout_s": args.timeout}
    if verb == "demand":
        return "GET", f"/demand?wait_s={args.wait}", None
    if verb == "upstreams":
        try:
            items = json.loads(args.json_list)
        except ValueError as err:
            raise ValueError(f"the live set is not JSON: {err}") from err
        return "POST", "/upstreams", {"upstreams": items}
    if verb == "drain-upstream":
        return "POST", "/upstreams/drain", {"name": args.name, "wait_s": args.wait}
    if verb == "serving":
        body = {"variant": args.variant, "demand": args.demand, "ok": not args.failed, "detail": args.detail}
        return "POST", "/serving", body
    query = []
    for item in args.query:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--query {item!r} is invalid; allowed: NAME=VALUE")
        query.append([name, value])
    body = {"method": args.method, "path": args.path, "query": query, "timeout_s": args.timeout}
    if args.json_body is not None:
        body["json"] = json.loads(args.json_body)
    return "POST", "/backend", _drop_none(body)


@functools.cache
def _client(socket_path: str) -> httpx.Client:
    """One client per control socket for this process (a session's verbs share it).

    Plain HTTP over a Unix socket: no TLS context is built (`verify=False` skips reading
    the CA bundle, about 50 ms per client in the gateway's image, which every verb of a
    swap's session paid on the clients' hold)."""
    transport = httpx.HTTPTransport(uds=socket_path, verify=False)
    return httpx.Client(
        transport=transport, base_url="http://gateway", timeout=httpx.Timeout(3700.0), verify=False
    )


def call(socket_path: str, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
    """One request to the control socket: (HTTP status, decoded JSON)."""
    reply = _client(socket_path).request(method, path, json=body)
    return reply.status_code, reply.json()


TETHER_DETAIL = "the swap that held ended without releasing its hold (its process died)"


def tether(socket_path: str, owner: str) -> dict[str, Any]:
    """Wait for stdin to close, then release every hold whose owner is `owner`."""
    while sys.stdin.buffer.read1(4096):
        pass
    return tether_release(socket_path, owner)


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


def run_argv(socket_path: str, argv: list[str]) -> tuple[int, dict[str, Any]]:
    """One verb of a session: (exit code, reply) as `main` would exit and print them."""
    try:
        args = _parser().parse_args(["--socket", socket_path, *argv])
    except SystemExit as stop:  # argparse's usage error (already written to stderr)
        return 2, {"error": f"bad command: {argv!r}"} if stop.code else {}
    if args.verb in {"tether", "session"}:
        return 2, {"error": f"{args.verb} cannot run inside a session"}
    try:
        method, path, body = request_for(args)
        status, reply = call(socket_path, method, path, body)
    except (httpx.HTTPError, OSError, ValueError) as err:
        return 1, {"error": f"control socket {socket_path}: {type(err).__name__}: {err}"}
    if not isinstance(reply, dict):
        return 1, {"error": f"unexpected reply: {reply!r}"[:300]}
    return (0 if status < 400 else 1), reply


def session(socket_path: str, owner: str) -> dict[str, Any]:
    """Run the commands read from stdin (one JSON line each) until it closes, then release
    every hold of `owner` (see the module's docstring)."""
    out = threading.Lock()

    def write(message: dict[str, Any]) -> None:
        with out:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def answer(line: bytes) -> None:
        try:
            command = json.loads(line)
            ident, argv = command.get("id"), command["argv"]
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise ValueError("argv is not a list of strings")
        except (ValueError, KeyError, AttributeError) as err:
            write({"id": None, "code": 2, "reply": {"error": f"bad command line: {err}"}})
            return
        code, reply = run_argv(socket_path, argv)
        write({"id": ident, "code": code, "reply": reply})

    write({"session": owner})
    for line in iter(sys.stdin.buffer.readline, b""):
        if line.strip():
            threading.Thread(target=answer, args=(line,), daemon=True).start()
    return tether_release(socket_path, owner)


def main(argv: list[str] | None = None) -> int:
    """Run one verb; returns the exit code."""
    args = _parser().parse_args(argv)
    if args.verb in {"tether", "session"}:
        try:
            ends = tether if args.verb == "tether" else session
            print(json.dumps(ends(args.socket, args.owner)))
        except (httpx.HTTPError, OSError, ValueError) as err:
            print(json.dumps({"error": f"control socket {args.socket}: {type(err).__name__}: {err}"}))
            return 1
        return 0
    try:
        method, path, body = request_for(args)
    except ValueError as err:
        print(f"composer.gateway.ctl: error: {err}", file=sys.stderr)
        return 2
    try:
        status, reply = call(args.socket, method, path, body)
    except (httpx.HTTPError, OSError, ValueError) as err:
        print(json.dumps({"error": f"control socket {args.socket}: {type(err).__name__}: {err}"}))
        return 1
    print(json.dumps(reply))
    return 0 if status < 400 else 1


if __name__ == "__main__":
    sys.exit(main())
