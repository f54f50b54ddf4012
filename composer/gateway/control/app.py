"""The control ASGI app, served only on a UNIX socket inside the gateway container.

Each route is one method of `Control`, listed once in `VERBS`; its arguments are the JSON
body, the query and the path's parameters in one dict (`ctl` forwards a request as it is).
JSON in, JSON out; errors are `{"error": ...}` with 400 (bad input), 404 (unknown id) or 502
(the backend did not answer). `GatewayControl`'s method of the same name says what each does.
Waiting verbs wait at most `wait_s` (default 25 s) per call so a caller going through
`docker exec` never hits its client's read timeout; it calls again until `done` is true.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from composer.errors import GatewayConfigError
from composer.gateway.config import MAX_LEASE_S, VARIANT, GatewayConfig, check_upstream, parse_live
from composer.gateway.public.proxy import ProxyApp
from composer.gateway.routing.gate import Gate
from composer.gateway.routing.live import LiveSet
from composer.gateway.routing.switching import Switcher
from composer.gateway.routing.upstream import Upstream
from composer.gateway.status.metrics import Metrics
from composer.gateway.status.view import StatusBoard
from composer.gateway.wire import DrainReport

MAX_WAIT_S = 25.0
KEEP_DRAINS = 16


class Controlled(Protocol):
    """What the control channel reaches of the gateway (`runtime.Gateway`)."""

    config: GatewayConfig
    gate: Gate
    live: LiveSet
    metrics: Metrics
    proxy: ProxyApp
    status: StatusBoard
    switcher: Switcher
    backend_client: httpx.AsyncClient

    @property
    def upstream(self) -> Upstream: ...

    @property
    def backend_ready(self) -> bool: ...

    def state(self) -> dict[str, Any]: ...

    def serving_name(self) -> str | None: ...

    def report(
        self, variant: str | None, demand_id: str | None, ok: bool, detail: str = "", follower: bool = False
    ) -> None: ...

    def apply_settings(self, changes: dict[str, str]) -> GatewayConfig: ...

    def settings_in_effect(self) -> dict[str, Any]: ...


PROBATION_STATES = ("running", "passed", "ended early", "failed", "interrupted")


class BadInput(ValueError):
    """A control request carried an invalid value (400)."""

    status = 400


def _seconds(body: dict[str, Any], key: str, default: float, high: float) -> float:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not (0 <= value <= high):
        raise BadInput(f"{key}={value!r} is invalid; allowed: a number of seconds from 0 to {high:g}")
    return float(value)


def _flag(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise BadInput(f"{key}={value!r} is invalid; allowed: true or false")
    return value


def _context(body: dict[str, Any]) -> int | None:
    """The max_model_len of the upstream streams continue on, if given."""
    value = body.get("max_model_len")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 30:
        raise BadInput(f"max_model_len={value!r} is invalid; allowed: a number of tokens from 1 to {1 << 30}")
    return value


def _probe_token(body: dict[str, Any]) -> str:
    token = body.get("probe_token", "")
    if token in ("", None):
        return ""
    if not isinstance(token, str) or not re.fullmatch(r"[\w-]{32,128}", token):
        raise BadInput("probe_token must be 32 to 128 URL-safe characters")
    return token


def _variant(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value in (None, ""):
        return None
    if not isinstance(value, str) or not VARIANT.fullmatch(value):
        raise BadInput(f"{key} must be a variant name (letters, digits, '.', '_', '-'; at most 64)")
    return value


class BackendUnreachable(Exception):
    """The backend did not answer a `/backend` call (502)."""

    status = 502


def _wait(args: dict[str, Any]) -> float:
    """A long poll's `wait_s` (a number, or its text in the query), clamped to 0..MAX_WAIT_S."""
    try:
        wait_s = float(args.get("wait_s", MAX_WAIT_S))
    except (TypeError, ValueError) as err:
        raise BadInput("wait_s must be a number of seconds") from err
    return min(max(wait_s, 0.0), MAX_WAIT_S)


class Control:
    """The control channel's verbs: one method each, from the request's arguments to the JSON reply."""

    def __init__(self, gateway: Controlled) -> None:
        self.gateway = gateway
        self._drains: OrderedDict[str, tuple[asyncio.Task[DrainReport], float]] = OrderedDict()

    def _lease(self, args: dict[str, Any]) -> float:
        default = self.gateway.config.hold_lease
        return _seconds(args, "lease_s", default, MAX_LEASE_S) or default

    async def state(self, _: dict[str, Any]) -> dict[str, Any]:
        return {**self.gateway.state(), "waking": bool(self.gateway.metrics.waking._value.get())}

    async def hold(self, args: dict[str, Any]) -> dict[str, Any]:
        h = self.gateway.gate.add_hold(self._lease(args), str(args.get("owner", "")), _probe_token(args))
        return {"hold": h.describe(time.monotonic()), "state": self.gateway.state()}

    async def renew(self, args: dict[str, Any]) -> dict[str, Any]:
        lease_s = None if args.get("lease_s") is None else _seconds(args, "lease_s", 0, MAX_LEASE_S)
        h = self.gateway.gate.renew(str(args.get("id", "")), lease_s)
        return {"hold": h.describe(time.monotonic())}

    async def release(self, args: dict[str, Any]) -> dict[str, Any]:
        gateway = self.gateway
        hold_id = args.get("id")
        serving = _variant(args, "serving")
        ok = _flag(args, "ok", True)
        released = gateway.gate.release(None if hold_id in (None, "") else str(hold_id))
        detail = str(args.get("detail", ""))[:500]
        if serving is not None:
            gateway.report(serving, None, ok, detail)
        elif released and not ok and not gateway.live.active:
            # the swap died without saying what serves (a tether's EOF): its backend may have been
            # put to sleep or stopped meanwhile, so it is probed again before it gets a request
            gateway.upstream.mark_down(f"the swap holding it ended without a report ({detail})")
        if released and not ok and serving is None:
            gateway.gate.hold_abandoned()
        reported = serving is not None or "ok" in args
        report = {"serving": serving, "ok": ok, "detail": detail} if reported else None
        gateway.status.switches.released(released, report)
        return {"released": released, "state": gateway.state()}

    async def drain(self, args: dict[str, Any]) -> dict[str, Any]:
        gateway = self.gateway
        timeout = _seconds(args, "timeout_s", gateway.config.drain_timeout, 86400)
        lease = self._lease(args)
        wait_s = _seconds(args, "wait_s", MAX_WAIT_S, MAX_WAIT_S)
        owner = str(args.get("owner", ""))
        target = _variant(args, "target")
        token = _probe_token(args)
        pause, pause_late = _flag(args, "continue", False), _flag(args, "continue_at_timeout", True)
        context = _context(args)
        pausing = None
        if gateway.proxy.continue_streams and (pause or pause_late):
            pausing = functools.partial(gateway.proxy.pause_streams, None, context)
        drain = gateway.gate.drain(timeout, lease, owner, token, pausing, pause_first=pause)
        task = asyncio.get_running_loop().create_task(drain)
        if target is not None:
            log = gateway.status.switches
            log.begin(target, gateway.serving_name(), owner or "control")

            def drained(t: asyncio.Task[DrainReport]) -> None:
                if not t.cancelled() and not t.exception():
                    r = t.result()
                    log.drained(r.hold_id, r.drained, r.cut, r.continued, r.refused)

            task.add_done_callback(drained)
        drain_id = secrets.token_hex(6)
        self._drains[drain_id] = (task, time.monotonic())
        while len(self._drains) > KEEP_DRAINS:  # kept until a caller has read them
            self._drains.popitem(last=False)
        return await self._drain_result(drain_id, wait_s)

    async def drain_wait(self, args: dict[str, Any]) -> dict[str, Any]:
        return await self._drain_result(str(args["id"]), _wait(args))

    async def _drain_result(self, drain_id: str, wait_s: float) -> dict[str, Any]:
        """The drain's result, or its progress when it still runs after `wait_s`."""
        task, started = self._drains[drain_id]
        done, _ = await asyncio.wait({task}, timeout=wait_s)
        if not done:
            inflight, elapsed = self.gateway.gate.inflight, round(time.monotonic() - started, 3)
            return {"id": drain_id, "done": False, "inflight": inflight, "elapsed_s": elapsed}
        return {"id": drain_id, "done": True, **dataclasses.asdict(task.result())}

    async def wait_ready(self, args: dict[str, Any]) -> dict[str, Any]:
        gateway = self.gateway
        deadline = time.monotonic() + _seconds(args, "timeout_s", MAX_WAIT_S, MAX_WAIT_S)
        while not gateway.backend_ready and time.monotonic() < deadline:
            await asyncio.sleep(min(0.02, gateway.config.poll_interval))
        return {"ready": gateway.backend_ready, "state": gateway.state()}

    async def backend(self, args: dict[str, Any]) -> dict[str, Any]:
        gateway = self.gateway
        method = str(args.get("method", "GET")).upper()
        path = str(args.get("path", ""))
        if method not in ("GET", "POST", "PUT", "DELETE") or not path.startswith("/"):
            raise BadInput("method must be GET, POST, PUT or DELETE and path must start with '/'")
        timeout = _seconds(args, "timeout_s", 300.0, 3600.0)
        query = args.get("query") or {}
        if not isinstance(query, dict | list):
            raise BadInput("query must be an object or a list of [name, value] pairs")
        kwargs: dict[str, Any] = {"params": query, "timeout": httpx.Timeout(timeout, connect=5.0)}
        if "json" in args:
            kwargs["json"] = args["json"]
        waking = method == "POST" and path == "/wake_up"

        def call(ok: bool | None) -> None:  # a POST (/sleep, /wake_up) is a stage of the switch
            if method == "POST":
                gateway.status.switches.backend_call(path, ok)
                if ok is not None:
                    gateway.metrics.count_sleep_call(path, ok)

        call(None)
        if waking:
            gateway.metrics.waking.set(1)
        try:
            reply = await gateway.backend_client.request(method, gateway.upstream.url + path, **kwargs)
        except httpx.HTTPError as err:
            call(False)
            raise BackendUnreachable(f"backend unreachable: {type(err).__name__}: {err}") from err
        finally:
            if waking:
                gateway.metrics.waking.set(0)
        call(reply.status_code == 200)
        try:
            payload: Any = reply.json()
        except ValueError:
            payload = reply.text
        return {"status": reply.status_code, "body": payload}

    async def demand(self, args: dict[str, Any]) -> dict[str, Any]:
        found = await self.gateway.switcher.next_demand(_wait(args))
        return {"demand": found.describe(time.monotonic()) if found else None}

    async def serving(self, args: dict[str, Any]) -> dict[str, Any]:
        variant = args.get("variant")
        if variant is not None and (not isinstance(variant, str) or not variant):
            raise BadInput("variant must be a variant name or null")
        demand_id = args.get("demand")
        ok = _flag(args, "ok", True)
        if demand_id is not None and not isinstance(demand_id, str):
            raise BadInput("demand must be a demand id")
        if "probation" in args:
            return {"annotated": self._probation(variant, args["probation"])}
        follower = args.get("follower", False) is True
        self.gateway.report(variant, demand_id, ok, str(args.get("detail", ""))[:500], follower)
        return {"switching": self.gateway.switcher.snapshot()}

    def _probation(self, variant: str | None, probation: Any) -> bool:
        """`{state, until?}`: the host's probation of the switch that brought `variant` in."""
        if not variant or not isinstance(probation, dict) or set(probation) - {"state", "until"}:
            raise BadInput("probation must be {state, until?} with a variant")
        state, until = probation.get("state"), probation.get("until")
        if state not in PROBATION_STATES:
            raise BadInput(f"probation state {state!r} is invalid; allowed: {', '.join(PROBATION_STATES)}")
        if until is not None and (isinstance(until, bool) or not isinstance(until, int | float) or until < 0):
            raise BadInput(f"probation until={until!r} is invalid; allowed: epoch seconds")
        return self.gateway.status.switches.probation(variant, state, until)

    async def upstreams(self, args: dict[str, Any]) -> dict[str, Any]:
        """The members requests go to: `upstreams` (the live set; `[]`: the single member) and
        `single` (the single member's `url` and `variant`); what is left out stays as it is."""
        gateway = self.gateway
        single = args.get("single") or {}
        if not isinstance(single, dict) or set(single) - {"url", "variant"}:
            raise BadInput('single must be an object {"url": URL, "variant": VARIANT}, either optional')
        try:
            specs = parse_live(args["upstreams"], "upstreams") if "upstreams" in args else None
            url = check_upstream(str(single["url"]), "single.url") if single.get("url") else None
        except (ValueError, GatewayConfigError) as err:
            raise BadInput(str(err)) from err
        variant = _variant(single, "variant")
        live = gateway.live
        previous = live.single.url
        if url is not None and live.single.poller.route(url) != url:
            gateway.metrics.routes.inc()
        live.name_single(variant)
        if specs is not None:
            live.replace(specs)
        if url is not None:
            gateway.status.switches.routed()
        return {"previous": previous, "upstreams": live.snapshot(), "state": gateway.state()}

    async def drain_upstream(self, args: dict[str, Any]) -> dict[str, Any]:
        name = args.get("name")
        if not isinstance(name, str) or not name:
            raise BadInput("name must be a live upstream's name")
        if name in self.gateway.live.members:
            raise BadInput(f"upstream {name!r} is still in the live set: POST /upstreams without it first")
        context, live, proxy = _context(args), self.gateway.live, self.gateway.proxy
        counts = []
        if _flag(args, "continue", False) and proxy.continue_streams:
            # its streams go on on the others (never paused on a member of the set at its URL)
            staying = {m.url for m in live.members.values()}
            urls = {m.url for m in live.left(name)} - staying
            counts = [proxy.pause_streams(url, context) for url in urls]
        left = await live.wait_gone(name, _seconds(args, "wait_s", MAX_WAIT_S, MAX_WAIT_S))
        continued, refused = sum(c for c, _ in counts), sum(r for _, r in counts)
        return {
            "name": name,
            "done": left == 0,
            "outstanding": left,
            "continued": continued,
            "refused": refused,
        }

    async def settings(self, _: dict[str, Any]) -> dict[str, Any]:
        return {
            "settings": dict(self.gateway.config.settings),
            "in_effect": self.gateway.settings_in_effect(),
        }

    async def put_settings(self, args: dict[str, Any]) -> dict[str, Any]:
        changes = args.get("settings")
        if not isinstance(changes, dict):
            raise BadInput('settings must be an object {"GATEWAY_X": "value"}')
        try:
            self.gateway.apply_settings(changes)
        except GatewayConfigError as err:
            raise BadInput(str(err)) from err
        return await self.settings(args)


# (HTTP method, path, Control's method) and the arguments it reads: the whole control channel.
VERBS: tuple[tuple[str, str, str], ...] = (
    ("GET", "/state", "state"),
    ("POST", "/hold", "hold"),  # {lease_s?, owner?, probe_token?}
    ("POST", "/renew", "renew"),  # {id, lease_s?}
    ("POST", "/release", "release"),  # {id?, serving?, ok?, detail?}
    # {timeout_s?, lease_s?, owner?, wait_s?, target?, probe_token?, continue?, continue_at_timeout?,
    #  max_model_len?}
    ("POST", "/drain", "drain"),
    ("GET", "/drain/{id}", "drain_wait"),  # ?wait_s= (while it runs: {done: false, inflight, elapsed_s})
    ("POST", "/wait-ready", "wait_ready"),  # {timeout_s}
    ("POST", "/backend", "backend"),  # {method, path, query?, json?, timeout_s?}
    ("GET", "/demand", "demand"),  # ?wait_s=
    ("POST", "/serving", "serving"),  # {variant, demand?, ok?, detail?, follower?} or {variant, probation}
    ("POST", "/upstreams", "upstreams"),  # {upstreams?: [{name, variant, url}], single?: {url?, variant?}}
    ("POST", "/upstreams/drain", "drain_upstream"),  # {name, wait_s?, continue?, max_model_len?}
    ("GET", "/settings", "settings"),
    ("PUT", "/settings", "put_settings"),  # {settings: {GATEWAY_X: value}}
)


async def _arguments(request: Request) -> dict[str, Any]:
    args: dict[str, Any] = {**request.query_params, **request.path_params}
    raw = await request.body()
    if not raw:
        return args
    try:
        data = json.loads(raw)
    except ValueError as err:
        raise BadInput(f"body is not JSON: {err}") from err
    if not isinstance(data, dict):
        raise BadInput("body must be a JSON object")
    return {**args, **data}


def build_control_app(gateway: Controlled) -> Starlette:
    """The control app bound to one gateway: a route per verb of `VERBS`."""
    control = Control(gateway)

    def endpoint(verb: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]) -> Callable[..., Any]:
        async def run(request: Request) -> JSONResponse:
            try:
                return JSONResponse(await verb(await _arguments(request)))
            except (BadInput, BackendUnreachable) as err:
                status, error = err.status, str(err)
            except KeyError as err:  # a drain's or a hold's (`UnknownHold`) id
                status, error = 404, f"unknown id {err.args[0]!r} (released, expired or never set)"
            return JSONResponse({"error": error}, status_code=status)

        return run

    routes = [Route(path, endpoint(getattr(control, name)), methods=[method]) for method, path, name in VERBS]
    return Starlette(routes=routes)
