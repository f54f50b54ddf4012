"""`/gateway/status` (JSON) and `/gateway/ui` (the status page), on the public port.

The JSON needs the API key, like `/v1` (401 `{"error": "Unauthorized"}` without it); the page
itself is static (no data in it) and reads the JSON with the key the user enters. Neither
reaches the control channel's powers, and neither shows the key or a hold's token.

The backend's `/metrics` (each variant's throughput, `throughput`) is sampled every
`SAMPLE_EVERY_S` seconds only while someone reads the status (for `WATCH_IDLE_S` after the last
read), and never during a switch, so an unwatched gateway sends nothing extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Protocol

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from composer.gateway.config import GatewayConfig
from composer.gateway.control.switchlog import KEEP_SWITCHES, SwitchLog
from composer.gateway.control.switchstore import SwitchStore
from composer.gateway.public.routes import KeyCheck
from composer.gateway.routing.gate import Gate
from composer.gateway.routing.live import LiveSet
from composer.gateway.routing.switching import Switcher
from composer.gateway.routing.upstream import Upstream
from composer.gateway.status.metrics import Metrics
from composer.gateway.status.page import HEADERS as PAGE_HEADERS
from composer.gateway.status.page import PAGE
from composer.gateway.status.throughput import Samples, parse

log = logging.getLogger("gateway")

SAMPLE_EVERY_S = 2.0
WATCH_IDLE_S = 300.0
SPARK_S = 300.0
METRICS_TIMEOUT = httpx.Timeout(2.0, connect=1.0)
UNKNOWN = "unknown"  # the variant name used while the host has not reported one
NO_STORE = {"Cache-Control": "no-store"}
# A probe's client exception, as a sentence (its class name is how the poller records it).
PLAIN_ERRORS = {
    "ConnectError": "its server does not accept connections (starting, stopped or gone)",
    "ConnectTimeout": "its server does not accept connections (starting, stopped or gone)",
    "ReadTimeout": "its server did not answer in time",
    "PoolTimeout": "its server did not answer in time",
    "ReadError": "its server closed the connection",
    "RemoteProtocolError": "its server closed the connection",
    "ValueError": "its server's /v1/models answer is not what vLLM sends",
    "AttributeError": "its server's /v1/models answer is not what vLLM sends",
}


class Shown(Protocol):
    """What the status reads of the gateway (`runtime.Gateway`)."""

    config: GatewayConfig
    gate: Gate
    live: LiveSet
    metrics: Metrics
    switcher: Switcher
    backend_client: httpx.AsyncClient
    started_at: float

    @property
    def upstream(self) -> Upstream: ...

    @property
    def backend_ready(self) -> bool: ...

    def serving_variants(self) -> list[str]: ...

    def settings_in_effect(self) -> dict[str, Any]: ...


def plain_error(raw: str) -> str:
    """A probe's error as a sentence: client exceptions by what they mean, others as they are."""
    name = raw.split(":", 1)[0].strip()
    return PLAIN_ERRORS.get(name, raw)


class StatusBoard:
    """The gateway's status for people: the switch log, throughput samples and both endpoints."""

    def __init__(self, gateway: Shown) -> None:
        self.gateway = gateway
        self.keys = KeyCheck(gateway.config.api_key)
        state_dir = gateway.config.state_dir
        store = SwitchStore(state_dir, KEEP_SWITCHES) if state_dir else None
        self.switches = SwitchLog(history=store.load(), on_finish=store.save) if store else SwitchLog()
        self.samples = Samples(max_gap=SAMPLE_EVERY_S * 3)
        self._task: asyncio.Task[None] | None = None
        self._watched_at = 0.0

    def watch(self) -> None:
        """Someone reads the status: sample the backend until nobody has for `WATCH_IDLE_S`."""
        self._watched_at = time.monotonic()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while time.monotonic() - self._watched_at < WATCH_IDLE_S:
            try:
                await self.sample_once()
            except Exception:  # a sampling bug must never take the gateway down
                log.exception("status: sampling the backend's metrics failed")
            await asyncio.sleep(SAMPLE_EVERY_S)

    async def sample_once(self) -> None:
        """Read each serving variant's `/metrics` once into its series (one member of each)."""
        gw = self.gateway
        if self.switches.current is not None:
            return
        members = {m.spec.variant or UNKNOWN: m for m in reversed(gw.live.serving()) if m.ready}
        for variant, member in members.items():
            url = member.url
            with contextlib.suppress(httpx.HTTPError):
                reply = await gw.backend_client.get(f"{url}/metrics", timeout=METRICS_TIMEOUT)
                # unless a switch began meanwhile: then the answer is not the serving variant's
                if reply.status_code == 200 and url == member.url and self.switches.current is None:
                    self.samples.add(variant, parse(reply.text, time.time()))

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def build(self) -> dict[str, Any]:
        """The status as JSON-ready data (never the key, a hold's id or its token)."""
        gw = self.gateway
        gate = gw.gate.snapshot()
        self.switches.expire(h["id"] for h in gate["holds"])
        switching = gw.switcher.snapshot()
        log_now = self.switches.snapshot()
        serving = gw.serving_variants()
        current = log_now["current"]
        if current is not None and current["stage"] != "drain" and not gw.live.active:
            serving = []  # the old variant stops (or sleeps): nothing serves until the gate passes
        sleeping = [v for v in self.switches.sleeping if v not in serving]
        now = time.time()
        shares = self._shares()
        names = [*serving, *sleeping]
        names += sorted(v for v in self.samples.series if v not in names)
        variants = {}
        for name in names:
            state = "serving" if name in serving else "sleeping" if name in sleeping else "stopped"
            variants[name] = {
                "state": state,
                "share": shares.get(name) if state == "serving" else None,
                **self.samples.summary(name),
                "sparkline": self.samples.sparkline(name, now - SPARK_S),
            }
        return {
            "time": round(now, 3),
            "served_name": gw.config.served_name,
            "uptime_s": round(now - gw.started_at, 3),
            "backend": {
                "ready": gw.backend_ready,
                "waking": bool(gw.metrics.waking._value.get()),
                "error": next(
                    (
                        plain_error(m.poller.last_error)
                        for m in gw.live.serving()
                        if not m.ready and m.poller.last_error
                    ),
                    "",
                ),
            },
            "serving": serving,
            "generation": gw.live.generation,
            "sleeping": sleeping,
            "switch": log_now["current"],
            "switches": log_now["recent"],
            "demand": switching["demand"],
            "policy": switching["policy"],
            "residency_left_s": switching["residency_left_s"],
            "requests": {
                "held": gate["held"],
                "inflight": gate["inflight"],
                "max_held": gate["max_held"],
                "open": gate["open"],
                "holds": [{"owner": h["owner"], "expires_in_s": h["expires_in_s"]} for h in gate["holds"]],
                "forwarded_total": gw.metrics.forwarded._value.get(),
                "refused_total": gw.metrics.refused_counts(),
            },
            "variants": variants,
            "settings": gw.settings_in_effect(),
            "live": gw.live.active,
            "upstreams": [
                {**u, "error": plain_error(u["error"]) if u.get("error") else u.get("error")}
                for u in gw.live.snapshot()
            ],
        }

    def _shares(self) -> dict[str, float]:
        """Each serving variant's share of the requests its members answered (0..1; None for
        every one before the first request; holders' probes are not requests)."""
        served: dict[str, int] = {}
        for member in self.gateway.live.serving():
            if member.spec.variant:
                served[member.spec.variant] = served.get(member.spec.variant, 0) + member.served
        total = sum(served.values())
        return {v: round(n / total, 4) for v, n in served.items()} if total else {}

    async def status(self, request: Request) -> Response:
        """`GET /gateway/status`: the status JSON, with the API key only."""
        if not self.keys.allows(request.headers.get("authorization", "").encode() or None):
            self.gateway.metrics.refused.labels("unauthorized").inc()
            return JSONResponse({"error": "Unauthorized"}, 401, headers=NO_STORE)
        self.watch()
        return JSONResponse(self.build(), headers=NO_STORE)

    async def page(self, _: Request) -> Response:
        """`GET /gateway/ui`: the self-contained status page (no data in it)."""
        return Response(PAGE, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)
