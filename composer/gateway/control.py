"""The control ASGI app, served only on a UNIX socket inside the gateway container.

Routes (JSON in, JSON out; errors are `{"error": ...}` with 400/404/504):

| route | does |
|---|---|
| `GET /state` | upstream, readiness, holds, held, in flight, counters, `waking` |
| `POST /hold {lease_s?, owner?}` | set a hold (expires after the lease unless renewed) |
| `POST /renew {id, lease_s?}` | extend a hold's lease |
| `POST /release {id?, serving?, ok?, detail?}` | remove one hold, or all; held requests flow in |
|  | arrival order; `serving`/`ok`/`detail`: what serves after the switch the hold was for |
| `POST /drain {timeout_s?, lease_s?, owner?, wait_s?, target?}` | hold, wait for in-flight requests, cut |
|  | at timeout; `target` (a variant) starts a switch in the status's switch log |
| `GET /drain/{id}?wait_s=` | wait for a drain started earlier and return its result; while it |
|  | runs: `{"done": false, "inflight", "elapsed_s"}` (the drain's progress) |
| `POST /route {upstream}` | forward to another backend from now on |
| `POST /wait-ready {timeout_s}` | wait until the backend is ready |
| `POST /backend {method, path, query?, json?, timeout_s?}` | call the backend directly (dev routes) |
| `GET /demand?wait_s=` | the pending switch demand (`{"demand": null}` when none came within wait_s) |
| `POST /serving {variant, demand?, ok?, detail?}` | the host reports what serves, and how a demand ended |
| `POST /upstreams {upstreams: [{name, variant, url}]}` | replace the live set (new members count as |
|  | ready: the host gated them; members that leave get no new requests); `[]`: single upstream |
| `POST /upstreams/drain {name, wait_s?}` | wait until a member that left has no requests in flight |

Waiting verbs wait at most `wait_s` (default 25 s) per call so a caller going through
`docker exec` never hits its client's read timeout; it calls again until `done` is true.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from composer.errors import GatewayConfigError

from .config import MAX_LEASE_S, check_upstream, parse_live
from .gate import DrainResult, UnknownHold

if TYPE_CHECKING:
    from .runtime import Gateway

MAX_WAIT_S = 25.0
KEEP_DRAINS = 16
VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class BadInput(ValueError):
    """A control request carried an invalid value."""


def _seconds(body: dict[str, Any], key: str, default: float, high: float) -> float:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not (0 <= value <= high):
        raise BadInput(f"{key}={value!r} is invalid; allowed: a number of seconds from 0 to {high:g}")
    return float(value)


def _probe_token(body: dict[str, Any]) -> str:
    """The optional probe token of a hold: 32 to 128 URL-safe characters."""
    token = body.get("probe_token", "")
    if token in ("", None):
        return ""
    if (
        not isinstance(token, str)
        or not 32 <= len(token) <= 128
        or not all(c.isalnum() or c in "-_" for c in token)
    ):
        raise BadInput("probe_token must be 32 to 128 URL-safe characters")
    return token


def _variant(body: dict[str, Any], key: str) -> str | None:
    """An optional variant name: 1 to 64 letters, digits, '.', '_' or '-'."""
    value = body.get(key)
    if value in (None, ""):
        return None
    if not isinstance(value, str) or not VARIANT_NAME.fullmatch(value):
        raise BadInput(f"{key} must be a variant name (letters, digits, '.', '_', '-'; at most 64)")
    return value


class Drains:
    """Drains started through the control channel, kept until a caller has read them."""

    def __init__(self, gateway: Gateway | None = None) -> None:
        self._tasks: OrderedDict[str, asyncio.Task[DrainResult]] = OrderedDict()
        self._started: dict[str, float] = {}
        self._gateway = gateway

    def start(
        self,
        gateway: Gateway,
        timeout: float,
        lease: float,
        owner: str,
        probe_token: str = "",
        on_done: Callable[[DrainResult], None] | None = None,
    ) -> str:
        drain_id = secrets.token_hex(6)
        task = asyncio.get_running_loop().create_task(gateway.gate.drain(timeout, lease, owner, probe_token))
        if on_done is not None:
            task.add_done_callback(lambda t: None if t.cancelled() or t.exception() else on_done(t.result()))
        self._tasks[drain_id] = task
        self._started[drain_id] = time.monotonic()
        while len(self._tasks) > KEEP_DRAINS:
            gone, _ = self._tasks.popitem(last=False)
            self._started.pop(gone, None)
        return drain_id

    async def wait(self, drain_id: str, wait_s: float) -> dict[str, Any]:
        task = self._tasks.get(drain_id)
        if task is None:
            raise KeyError(drain_id)
        done, _ = await asyncio.wait({task}, timeout=wait_s)
        if not done:  # progress: what still runs, and for how long the drain has waited
            reply: dict[str, Any] = {"id": drain_id, "done": False}
            if self._gateway is not None:
                reply["inflight"] = self._gateway.gate.inflight
            reply["elapsed_s"] = round(time.monotonic() - self._started.get(drain_id, time.monotonic()), 3)
            return reply
        return {"id": drain_id, "done": True, **task.result().to_dict()}


def build_control_app(gateway: Gateway) -> Starlette:
    """The control app bound to one gateway."""
    drains = Drains(gateway)

    async def body_of(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw:
            return {}
        try:
            data = await request.json()
        except ValueError as err:
            raise BadInput(f"body is not JSON: {err}") from err
        if not isinstance(data, dict):
            raise BadInput("body must be a JSON object")
        return data

    def state_now() -> dict[str, Any]:
        return {**gateway.state(), "waking": bool(gateway.metrics.waking._value.get())}

    async def state(_: Request) -> JSONResponse:
        return JSONResponse(state_now())

    async def hold(request: Request) -> JSONResponse:
        body = await body_of(request)
        lease = _seconds(body, "lease_s", gateway.config.hold_lease, MAX_LEASE_S) or gateway.config.hold_lease
        h = gateway.gate.add_hold(lease, str(body.get("owner", "")), _probe_token(body))
        return JSONResponse({"hold": h.describe(time.monotonic()), "state": gateway.state()})

    async def renew(request: Request) -> JSONResponse:
        body = await body_of(request)
        lease = body.get("lease_s")
        lease_s = None if lease is None else _seconds(body, "lease_s", 0, MAX_LEASE_S)
        h = gateway.gate.renew(str(body.get("id", "")), lease_s)
        return JSONResponse({"hold": h.describe(time.monotonic())})

    async def release(request: Request) -> JSONResponse:
        body = await body_of(request)
        hold_id = body.get("id")
        serving = _variant(body, "serving")
        ok = body.get("ok", True)
        if not isinstance(ok, bool):
            raise BadInput("ok must be true or false")
        released = gateway.gate.release(None if hold_id in (None, "") else str(hold_id))
        detail = str(body.get("detail", ""))[:500]
        if serving is not None:
            gateway.switcher.report(serving, None, ok, detail)
        reported = serving is not None or "ok" in body
        report = {"serving": serving, "ok": ok, "detail": detail} if reported else None
        gateway.status.switches.released(released, report)
        return JSONResponse({"released": released, "state": gateway.state()})

    async def drain(request: Request) -> JSONResponse:
        body = await body_of(request)
        timeout = _seconds(body, "timeout_s", gateway.config.drain_timeout, 86400)
        lease = _seconds(body, "lease_s", gateway.config.hold_lease, MAX_LEASE_S) or gateway.config.hold_lease
        wait_s = _seconds(body, "wait_s", MAX_WAIT_S, MAX_WAIT_S)
        owner = str(body.get("owner", ""))
        target = _variant(body, "target")
        token = _probe_token(body)
        log = gateway.status.switches
        if target is not None:
            log.begin(target, gateway.switcher.serving, owner or "control")
        on_done = (lambda r: log.drained(r.hold_id, r.drained, r.cut)) if target is not None else None
        drain_id = drains.start(gateway, timeout, lease, owner, token, on_done)
        return JSONResponse(await drains.wait(drain_id, wait_s))

    async def drain_wait(request: Request) -> JSONResponse:
        try:
            wait_s = float(request.query_params.get("wait_s", MAX_WAIT_S))
        except ValueError as err:
            raise BadInput("wait_s must be a number of seconds") from err
        return JSONResponse(await drains.wait(request.path_params["id"], min(max(wait_s, 0.0), MAX_WAIT_S)))

    async def route(request: Request) -> JSONResponse:
        body = await body_of(request)
        try:
            url = check_upstream(str(body.get("upstream", "")), "upstream")
        except GatewayConfigError as err:
            raise BadInput(str(err)) from err
        old = gateway.route(url)
        gateway.status.switches.routed()
        return JSONResponse({"previous": old, "upstream": url, "state": gateway.state()})

    async def wait_ready(request: Request) -> JSONResponse:
        body = await body_of(request)
        timeout = _seconds(body, "timeout_s", MAX_WAIT_S, MAX_WAIT_S)
        deadline = time.monotonic() + timeout
        while not gateway.backend_ready and time.monotonic() < deadline:
            await asyncio.sleep(min(0.02, gateway.config.poll_interval))
        return JSONResponse({"ready": gateway.backend_ready, "state": gateway.state()})

    async def backend(request: Request) -> JSONResponse:
        body = await body_of(request)
        method = str(body.get("method", "GET")).upper()
        path = str(body.get("path", ""))
        if method not in ("GET", "POST", "PUT", "DELETE") or not path.startswith("/"):
            raise BadInput("method must be GET, POST, PUT or DELETE and path must start with '/'")
        timeout = _seconds(body, "timeout_s", 300.0, 3600.0)
        query = body.get("query") or {}
        if not isinstance(query, dict | list):
            raise BadInput("query must be an object or a list of [name, value] pairs")
        kwargs: dict[str, Any] = {"params": query, "timeout": httpx.Timeout(timeout, connect=5.0)}
        if "json" in body:
            kwargs["json"] = body["json"]
        waking = method == "POST" and path == "/wake_up"
        switches = gateway.status.switches
        if method == "POST":
            switches.backend_call(path, None)
        if waking:
            gateway.metrics.waking.set(1)
        try:
            reply = await gateway.backend_client.request(method, gateway.upstream.url + path, **kwargs)
        except httpx.HTTPError as err:
            if method == "POST":
                gateway.metrics.count_sleep_call(path, ok=False)
                switches.backend_call(path, False)
            return JSONResponse(
                {"error": f"backend unreachable: {type(err).__name__}: {err}"}, status_code=502
            )
        finally:
            if waking:
                gateway.metrics.waking.set(0)
        if method == "POST":
            gateway.metrics.count_sleep_call(path, ok=reply.status_code == 200)
            switches.backend_call(path, reply.status_code == 200)
        try:
            payload: Any = reply.json()
        except ValueError:
            payload = reply.text
        return JSONResponse({"status": reply.status_code, "body": payload})

    async def demand(request: Request) -> JSONResponse:
        try:
            wait_s = float(request.query_params.get("wait_s", MAX_WAIT_S))
        except ValueError as err:
            raise BadInput("wait_s must be a number of seconds") from err
        found = await gateway.switcher.next_demand(min(max(wait_s, 0.0), MAX_WAIT_S))
        return JSONResponse({"demand": found.describe(time.monotonic()) if found else None})

    async def serving(request: Request) -> JSONResponse:
        body = await body_of(request)
        variant = body.get("variant")
        if variant is not None and (not isinstance(variant, str) or not variant):
            raise BadInput("variant must be a variant name or null")
        demand_id = body.get("demand")
        ok = body.get("ok", True)
        if not isinstance(ok, bool) or (demand_id is not None and not isinstance(demand_id, str)):
            raise BadInput("ok must be true or false and demand a demand id")
        gateway.switcher.report(variant, demand_id, ok, str(body.get("detail", ""))[:500])
        return JSONResponse({"switching": gateway.switcher.snapshot()})

    async def upstreams(request: Request) -> JSONResponse:
        body = await body_of(request)
        try:
            specs = parse_live(body.get("upstreams"), "upstreams")
        except ValueError as err:
            raise BadInput(str(err)) from err
        gateway.set_upstreams(specs)
        return JSONResponse({"upstreams": gateway.live.snapshot(), "state": gateway.state()})

    async def drain_upstream(request: Request) -> JSONResponse:
        body = await body_of(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise BadInput("name must be a live upstream's name")
        if name in gateway.live.members:
            raise BadInput(f"upstream {name!r} is still in the live set: POST /upstreams without it first")
        wait_s = _seconds(body, "wait_s", MAX_WAIT_S, MAX_WAIT_S)
        left = await gateway.live.wait_gone(name, wait_s)
        return JSONResponse({"name": name, "done": left == 0, "outstanding": left})

    async def on_bad_input(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=400)

    async def on_unknown(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": f"unknown id {exc.args[0]!r} (released, expired or never set)"}, 404)

    return Starlette(
        routes=[
            Route("/state", state),
            Route("/hold", hold, methods=["POST"]),
            Route("/renew", renew, methods=["POST"]),
            Route("/release", release, methods=["POST"]),
            Route("/drain", drain, methods=["POST"]),
            Route("/drain/{id}", drain_wait),
            Route("/route", route, methods=["POST"]),
            Route("/wait-ready", wait_ready, methods=["POST"]),
            Route("/backend", backend, methods=["POST"]),
            Route("/demand", demand),
            Route("/serving", serving, methods=["POST"]),
            Route("/upstreams", upstreams, methods=["POST"]),
            Route("/upstreams/drain", drain_upstream, methods=["POST"]),
        ],
        exception_handlers={BadInput: on_bad_input, UnknownHold: on_unknown, KeyError: on_unknown},
    )
