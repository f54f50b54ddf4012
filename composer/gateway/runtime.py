"""One gateway: its settings, gate, upstream set, HTTP clients and both ASGI apps.

`Gateway` wires the parts; `GatewayServer.serve()` runs the public app on TCP (with `limits`'
connection limits) and the control app on a UNIX socket (mode 0600) in one event loop until
`stop()` or SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import uvicorn
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from composer.errors import GatewayConfigError
from composer.gateway.config import (
    LIVE,
    VARIANT,
    GatewayConfig,
    LiveSpec,
    check_upstream,
    field_name,
    parse_live,
)
from composer.gateway.control.app import build_control_app
from composer.gateway.control.switchstore import ServingStore, SettingsStore
from composer.gateway.public.answers import send_error
from composer.gateway.public.limits import ConnectionLimits, limited_protocol, open_files_for
from composer.gateway.public.proxy import ProxyApp
from composer.gateway.public.routes import PUBLIC_PATHS, KeyCheck, is_own
from composer.gateway.public.screen import screen
from composer.gateway.routing.gate import Gate, Refused
from composer.gateway.routing.live import COUNTED, LiveSet
from composer.gateway.routing.switching import Switcher
from composer.gateway.routing.upstream import Upstream
from composer.gateway.status.metrics import Metrics
from composer.gateway.status.view import StatusBoard
from composer.gateway.wire import STATUS_PROBE_HEADER

log = logging.getLogger("gateway")

POLICY_TICK_S = 0.5


class Gateway:
    """The gateway's state and apps, bound to the running event loop by `start()`."""

    def __init__(self, config: GatewayConfig) -> None:
        self.started_with = dict(config.settings)  # the live settings of its environment
        instance = container_instance(config.control_socket) if config.state_dir else ""
        self.store = SettingsStore(config.state_dir, instance) if config.state_dir else None
        self.serving_store = ServingStore(config.state_dir, instance) if config.state_dir else None
        config = self._restored(config)
        self.config = config
        self.on_settings: list[Callable[[GatewayConfig], None]] = []  # the server's connection limits
        self.metrics = Metrics()
        self.started_at = time.time()
        self.gate = Gate(
            max_held=config.max_held,
            hold_timeout=config.hold_timeout,
            retry_after=config.retry_after,
            metrics=self.metrics,
        )
        self.live = LiveSet(
            config, self.metrics, self._ready, urgent=lambda: not self.gate.is_open or self.gate.held > 0
        )
        self.gate.probe = self._probe_serving
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self.backend_client = httpx.AsyncClient(headers=headers, trust_env=False)
        self.switcher = Switcher(config, self.metrics)
        self.status = StatusBoard(self)
        self.proxy = ProxyApp(
            self.gate, self.live, KeyCheck(config.api_key), self.metrics, self.switcher, config
        )
        self.public_app = self._public_app()
        self.control_app = build_control_app(self)
        self._policy: asyncio.Task[None] | None = None

    def _public_app(self) -> ASGIApp:
        """Every request is screened (canonical path, one Authorization header); the gateway's
        own paths go to a small router, every other request straight to the proxy (no router
        or middleware on the forwarding path: they would run for every chunk sent)."""

        async def metrics(_: Request) -> Response:
            return Response(self.metrics.render(), media_type=CONTENT_TYPE_LATEST)

        async def health(_: Request) -> JSONResponse:
            ready = self.backend_ready
            return JSONResponse({"gateway": "up", "backend_ready": ready, "held": self.gate.held})

        own = Starlette(
            routes=[
                Route(PUBLIC_PATHS[0], metrics),
                Route(PUBLIC_PATHS[1], health),
                Route(PUBLIC_PATHS[2], self.status.status),
                Route(PUBLIC_PATHS[3], self.status.page),
            ]
        )
        proxy = self.proxy
        refused = self.metrics.refused
        status_probe = STATUS_PROBE_HEADER.encode()

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                return
            try:
                screen(scope)  # the canonical path, from here on the only one
            except Refused as refusal:
                refused.labels(refusal.reason).inc()
                await send_error(send, refusal.status, str(refusal))
                return
            if is_own(scope["path"]):
                await own(scope, receive, send)
                return
            if any(k == status_probe for k, _ in scope["headers"]):
                COUNTED.set(False)  # this request's task only
            await proxy(scope, receive, send)

        return app

    def _restored(self, config: GatewayConfig) -> GatewayConfig:
        """`config` with the settings this container was given in place before a restart."""
        saved = self.store.load(self.started_with) if self.store is not None else {}
        if not saved:
            return config
        try:
            return config.with_settings({**{k: "" for k in self.started_with}, **saved})
        except GatewayConfigError as err:
            log.warning("settings: the saved settings are ignored: %s", err)
            return config

    def apply_settings(self, changes: dict[str, str]) -> GatewayConfig:
        """Validate `changes` (`config.LIVE` variables) with the rest, then make them the settings
        in effect at once and keep them for a restart; raises GatewayConfigError (nothing changed)."""
        config = self.config.with_settings(changes)
        if config.log_level != self.config.log_level:
            logging.getLogger().setLevel(config.log_level.upper())
        self.config = config
        self.gate.max_held, self.gate.hold_timeout = config.max_held, config.hold_timeout
        self.gate.retry_after = config.retry_after
        self.upstream.candidates = config.upstream_candidates
        self.live.config = config
        self.switcher.configure(config)
        self.proxy.configure(config)
        self._list_aliases()
        for hook in self.on_settings:
            hook(config)
        if config.policy == "auto" and self._policy is None:
            self._policy = asyncio.get_running_loop().create_task(self._run_policy())
        if self.store is not None:
            self.store.save(self.started_with, dict(config.settings))
        log.info("settings applied in place: %s", ", ".join(f"{k}={v}" for k, v in sorted(changes.items())))
        return config

    def settings_in_effect(self) -> dict[str, Any]:
        """The value of each setting a running gateway takes in place (JSON-ready, no secret)."""
        described = self.config.describe()
        return {name: described[field_name(name)] for name in LIVE}

    @property
    def upstream(self) -> Upstream:
        """The single member's readiness watcher (its URL, its last error)."""
        return self.live.single.poller

    @property
    def backend_ready(self) -> bool:
        """Any member of the set requests go to is ready."""
        return self.live.any_ready()

    async def _probe_serving(self) -> bool:
        """A fresh probe of the members requests go to: is any ready?"""
        return any(await asyncio.gather(*(m.poller.probe() for m in self.live.serving())))

    def _ready(self, any_ready: bool) -> None:
        self.gate.set_backend_ready(any_ready)
        self.status.switches.backend_ready(any_ready)

    def serving_variants(self) -> list[str]:
        """The variants that serve now: the live set's, or the single member's (as reported)."""
        return self.live.variants()

    def serving_name(self) -> str | None:
        """What serves, in one name for a switch's history (None: the host has not said)."""
        return ", ".join(self.serving_variants()) or None

    def report(
        self, variant: str | None, demand_id: str | None, ok: bool, detail: str = "", follower: bool = False
    ) -> None:
        """The host says which variant serves (the single member's) and how a demand ended."""
        self.switcher.report(variant, demand_id, ok, detail, follower)
        self.live.name_single(self.switcher.serving)

    def _list_aliases(self) -> None:
        """`/v1/models` lists the aliases wherever a request may name them: with switching, or
        while a live set routes by alias."""
        config = self.config
        self.proxy.aliases = dict(config.aliases) if config.switch_on_model or self.live.active else {}

    def _served_changed(self) -> None:
        """The set, the single member's URL or its variant changed: the metric, the aliases
        listed and the record."""
        self.metrics.set_serving(self.serving_variants())
        self._list_aliases()
        if self.serving_store is not None:
            self.serving_store.save(self.live.record())

    def _restore_serving(self) -> tuple[LiveSpec, ...]:
        """The live set to start with, the single member's URL and its variant as they were: a
        restart of this container takes its saved record whole; a new one beside a running
        gateway (a replacement) starts from its own settings and keeps only the single
        member's variant, when both it and the record route to the single member; a new one
        after a stop (`down`, then `up`) keeps nothing."""
        specs = self.config.live_upstreams
        store = self.serving_store
        record, mine, stopped = store.load() if store is not None else ({}, False, False)
        single = record.get("single") if isinstance(record.get("single"), dict) else {}
        try:
            members = parse_live(record.get("members", []), "serving.json") if record else ()
            url = check_upstream(str(single.get("url") or self.config.upstream), "serving.json")
        except (ValueError, GatewayConfigError) as err:
            log.warning("serving: the saved record is ignored: %s", err)
            return specs
        variant = single.get("variant")
        variant = variant if isinstance(variant, str) and VARIANT.fullmatch(variant) else None
        generation = record.get("generation")
        if isinstance(generation, int) and not isinstance(generation, bool):
            self.live.generation = max(self.live.generation, generation)
        if mine:
            specs = members
            if url != self.live.single.url:
                self.live.single.poller.route(url)
        elif members or specs or stopped:
            variant = None  # a live set named the variants, or nothing served since a stop
        if variant:
            self.switcher.serving = variant
            self.live.name_single(variant)
            log.info("serving: %s, as before the restart", ", ".join(self.live.variants()) or variant)
        return specs

    def state(self) -> dict[str, Any]:
        return {
            "served_name": self.config.served_name,
            "backend_error": self.upstream.last_error,
            "live": self.live.active,
            "upstreams": self.live.snapshot(),
            "generation": self.live.generation,
            **self.gate.snapshot(),
            "refused": self.metrics.refused_counts(),
            "drained_total": self.metrics.drained._value.get(),
            "cut_total": self.metrics.cut._value.get(),
            "routes_total": self.metrics.routes._value.get(),
            "switching": self.switcher.snapshot(),
            "uptime_s": round(time.time() - self.started_at, 3),
            "pid": os.getpid(),
            "settings": dict(self.config.settings),
        }

    async def start(self) -> None:
        """Start the forwarding, the readiness polls and the policy (inside the serving loop)."""
        self.proxy.open()
        specs = self._restore_serving()
        self.live.on_change = self._served_changed
        self.live.start(specs)
        if self.config.policy == "auto":
            self._policy = asyncio.get_running_loop().create_task(self._run_policy())

    async def _run_policy(self) -> None:
        while True:
            await asyncio.sleep(POLICY_TICK_S)
            if self.live.active:
                continue  # live routing picks per request: no switch demands
            try:
                self.switcher.tick(self.gate.held + self.gate.inflight + self.proxy.switch_waiting)
            except Exception:  # a policy bug must not stop the gateway
                log.exception("policy tick failed")

    async def aclose(self) -> None:
        if self._policy is not None:
            self._policy.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._policy
        if self.serving_store is not None:
            self.serving_store.stopped()
        await self.status.aclose()
        await self.proxy.aclose()
        await self.backend_client.aclose()
        await self.live.aclose()


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to `serve()` (two servers share one loop),
    and whose main loop sleeps until `should_exit` is set: uvicorn's looks at it every 0.1 s
    (20 wake-ups a second of an idle gateway for its two servers), to renew a date header the
    gateway does not send."""

    _exit: asyncio.Future[None] | None = None  # done once `should_exit` is set (main_loop's wait)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    @property
    def should_exit(self) -> bool:
        return self.__dict__.get("_should_exit", False)

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self.__dict__["_should_exit"] = value
        waiter = self._exit
        if value and waiter is not None:  # (thread-safe: a test's thread may set it)
            waiter.get_loop().call_soon_threadsafe(_settle, waiter)

    async def main_loop(self) -> None:
        # the first tick sets the default headers (no date header: nothing to renew later)
        c = self.config
        if c.date_header or c.limit_max_requests is not None or c.callback_notify is not None:
            await super().main_loop()
            return
        if await self.on_tick(0):
            return
        self._exit = asyncio.get_running_loop().create_future()
        try:
            if not self.should_exit:
                await self._exit
        finally:
            self._exit = None
        await self.on_tick(0)


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def control_socket(path: str) -> socket.socket:
    """Bind the control socket with mode 0600 (created under umask 0177, checked after)."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.set_inheritable(True)
    return sock


def container_instance(control_socket: str) -> str:
    """This container's identity, in a file beside the control socket: a restart keeps it, a new
    container has another (its host name would not do: gateways share the port holder's network)."""
    path = os.path.join(os.path.dirname(control_socket), "instance")
    with contextlib.suppress(OSError):
        with open(path, encoding="ascii") as fh:
            found = fh.read(64).strip()
        if found:
            return found
    made = uuid.uuid4().hex
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(path, "x", encoding="ascii") as out:
            out.write(made)
    return made


def public_socket(host: str, port: int) -> socket.socket:
    """The public TCP listener, bound with SO_REUSEPORT: during a replacement the new gateway
    listens on the same port (in the port holder's network) before the old one closes, and
    the kernel hands connections to both until it does."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=2048, reuse_port=True)
    sock.set_inheritable(True)
    return sock


def _uvicorn_config(app: Any, config: GatewayConfig, **kwargs: Any) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        log_level=config.log_level,
        access_log=False,
        proxy_headers=False,  # no X-Forwarded-* middleware: nothing reads the client's address
        server_header=False,
        date_header=False,
        lifespan="off",
        **{"timeout_graceful_shutdown": 5, **kwargs},
    )


def _limits(config: GatewayConfig) -> ConnectionLimits:
    """The connection limits of `config`, the cap fitted in the open files this process may have."""
    cap, short = open_files_for(config.max_connections)
    if short:
        log.warning(short)
    return ConnectionLimits(config.max_head_bytes, config.head_timeout, cap, config.body_timeout)


class GatewayServer:
    """The public server (TCP) and the control server (UNIX socket) of one gateway."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.gateway = Gateway(config)
        config = self.gateway.config  # with the settings a restart keeps
        self.protocol = limited_protocol(_limits(config), self.gateway.metrics)
        self.public = _Server(
            _uvicorn_config(
                self.gateway.public_app,
                config,
                host=config.host,
                port=config.port,
                http=self.protocol,
                timeout_keep_alive=config.keep_alive_timeout,
                # a stopping gateway finishes its requests (streams) for up to a drain
                timeout_graceful_shutdown=config.drain_timeout,
            )
        )
        self.control = _Server(_uvicorn_config(self.gateway.control_app, config))
        self.gateway.on_settings.append(self._limits)
        self.ready = asyncio.Event()

    def _limits(self, config: GatewayConfig) -> None:
        self.protocol.registry.limits = _limits(config)
        served: Any = self.public.config  # uvicorn types it int; a float works (timer delays)
        served.timeout_keep_alive = config.keep_alive_timeout
        served.timeout_graceful_shutdown = config.drain_timeout

    def stop(self) -> None:
        """Ask both servers to finish (call it in the serving loop: signal handlers, or
        `call_soon_threadsafe` from another thread); held requests are answered 503 at once."""
        self.gateway.gate.stop()
        self.gateway.switcher.stop()
        self.public.should_exit = True
        self.control.should_exit = True

    async def serve(self, *, signals: bool = True) -> None:
        """Serve until `stop()` (by default on SIGTERM or SIGINT)."""
        if signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                asyncio.get_running_loop().add_signal_handler(sig, self.stop)
        # listening before the control channel answers: a replacement that reaches the new
        # gateway's control channel knows its port takes connections
        public = public_socket(self.config.host, self.config.port)
        sock = control_socket(self.config.control_socket)
        await self.gateway.start()
        try:
            tasks = [
                asyncio.ensure_future(self.control.serve(sockets=[sock])),
                asyncio.ensure_future(self.public.serve(sockets=[public])),
            ]
            while not (self.public.started and self.control.started):
                if any(t.done() for t in tasks):
                    break
                await asyncio.sleep(0.005)
            if self.public.started and self.control.started:
                self.ready.set()
                c = self.config
                log.info("gateway on %s:%d -> %s (control %s)", c.host, c.port, c.upstream, c.control_socket)
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            self.stop()
            await asyncio.gather(*tasks, return_exceptions=True)
            for task in done:
                task.result()  # raises what stopped that server
        finally:
            await self.gateway.aclose()
            sock.close()
            public.close()
            with contextlib.suppress(OSError):
                os.unlink(self.config.control_socket)
