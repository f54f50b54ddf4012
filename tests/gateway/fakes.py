"""A fake vLLM backend (a real uvicorn server in a thread) and a gateway run in a thread."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from composer.gateway.config import GatewayConfig
from composer.gateway.runtime import GatewayServer
from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]
SERVED = "test-model"


@dataclass
class BackendState:
    """What the fake backend saw; mutated from its own thread."""

    ready: bool = True
    api_key: str = ""
    arrivals: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    sleeping: bool = False
    wake_seconds: float = 0.0  # how long /wake_up takes
    wake_release: threading.Event | None = None  # when given, /wake_up also waits until it is set
    sleep_status: int = 200  # what /sleep answers
    models: list[str] = field(default_factory=list)  # the `model` of each chat request
    health_checks: int = 0
    frozen: bool = False  # every request waits, /health too (a paused container)
    requests: list[str] = field(default_factory=list)  # "METHOD raw_path" of every request


POLLER_REQUESTS = ("GET /health", "GET /v1/models")  # what the gateway's readiness poller sends


def backend_app(state: BackendState) -> Any:
    async def thawed() -> None:
        while state.frozen:
            await asyncio.sleep(0.01)

    async def health(_: Request) -> Response:
        await thawed()
        state.health_checks += 1
        return Response(status_code=200 if state.ready else 503)

    def authorised(request: Request) -> bool:
        return not state.api_key or request.headers.get("authorization") == f"Bearer {state.api_key}"

    async def models(request: Request) -> Response:
        if not authorised(request):
            return JSONResponse({"error": "Unauthorized"}, 401)
        return JSONResponse({"object": "list", "data": [{"id": SERVED, "object": "model"}]})

    async def chat(request: Request) -> Response:
        if not authorised(request):
            return JSONResponse({"error": "Unauthorized"}, 401)
        body = await request.json()
        await thawed()
        tag = str(body.get("tag", ""))
        state.models.append(str(body.get("model")))
        state.arrivals.append(tag)
        chunks = int(body.get("chunks", 5))
        interval = float(body.get("interval", 0.0))
        wait_release = bool(body.get("wait_release", False))

        async def stream():
            try:
                for i in range(chunks):
                    yield f'data: {{"i": {i}, "tag": "{tag}"}}\n\n'.encode()
                    if i == 0 and wait_release:
                        while not state.release.is_set():
                            await asyncio.sleep(0.005)
                    if interval:
                        await asyncio.sleep(interval)
                yield b"data: [DONE]\n\n"
                state.finished.append(tag)
            except asyncio.CancelledError:
                state.cancelled.append(tag)
                raise

        if body.get("stream", True):
            return StreamingResponse(stream(), media_type="text/event-stream")
        await asyncio.sleep(interval)
        state.finished.append(tag)
        return JSONResponse({"tag": tag})

    async def echo(request: Request) -> Response:
        digest = hashlib.sha256()
        size = pieces = 0
        async for chunk in request.stream():
            digest.update(chunk)
            size += len(chunk)
            pieces += bool(chunk)
        return JSONResponse({"size": size, "sha256": digest.hexdigest(), "pieces": pieces})

    async def dev(request: Request) -> Response:
        state.paths.append(request.url.path + ("?" + request.url.query if request.url.query else ""))
        if request.url.path == "/sleep":
            if state.sleep_status != 200:
                return Response(status_code=state.sleep_status)
            state.sleeping = True
        elif request.url.path == "/wake_up":
            await asyncio.sleep(state.wake_seconds)
            while state.wake_release is not None and not state.wake_release.is_set():
                await asyncio.sleep(0.01)
            state.sleeping = False
        if request.url.path == "/is_sleeping":
            return JSONResponse({"is_sleeping": state.sleeping})
        return Response(status_code=200)

    async def seen(request: Request) -> Response:
        """What reached the backend (headers in order, query); answers gzip bytes, untouched."""
        report = {
            "headers": [[k.decode(), v.decode()] for k, v in request.scope["headers"]],
            "query": request.scope["query_string"].decode(),
            "peer_port": request.scope["client"][1],
        }
        body = gzip.compress(json.dumps(report).encode())
        return Response(
            body, media_type="application/json", headers={"content-encoding": "gzip", "x-backend": "seen"}
        )

    async def plain(request: Request) -> Response:
        state.paths.append(request.url.path)
        return PlainTextResponse(f"backend {request.url.path}")

    app = Starlette(
        routes=[
            Route("/health", health),
            Route("/v1/models", models),
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/echo", echo, methods=["POST"]),
            Route("/v1/seen", seen, methods=["GET", "POST"]),
            Route("/sleep", dev, methods=["POST"]),
            Route("/wake_up", dev, methods=["POST"]),
            Route("/is_sleeping", dev),
            Route("/version", plain),
            Route("/metrics", plain),
        ]
    )

    async def recorded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            state.requests.append(f"{scope['method']} {scope['raw_path'].decode('latin-1')}")
        await app(scope, receive, send)

    return recorded


async def prompt_main_loop(server: uvicorn.Server) -> None:
    """uvicorn's `Server.main_loop`, looking at `should_exit` every 5 ms instead of every 0.1 s:
    a test's servers stop at once (each stop waited up to 0.1 s, paid again by every test)."""
    counter = 0
    while not await server.on_tick(counter):
        counter = (counter + 1) % 864000
        await asyncio.sleep(0.005)


def stop_promptly(server: uvicorn.Server) -> uvicorn.Server:
    """`server` with `prompt_main_loop` as its main loop."""
    server.main_loop = types.MethodType(prompt_main_loop, server)  # type: ignore[method-assign]
    return server


class ThreadServer:
    """A uvicorn server on 127.0.0.1 in a background thread."""

    def __init__(self, app: Any, port: int) -> None:
        self.port = port
        self.server = stop_promptly(
            uvicorn.Server(
                uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class FakeBackend(ThreadServer):
    """The fake vLLM server with its recorded state."""

    def __init__(self, port: int | None = None, state: BackendState | None = None) -> None:
        self.state = state or BackendState()
        super().__init__(backend_app(self.state), port or free_port())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class GatewayThread:
    """A real gateway (public TCP port + control UNIX socket) in a background thread."""

    def __init__(self, upstream: str, **settings: Any) -> None:
        self.dir = tempfile.mkdtemp(prefix="vctgw-")
        self.port = settings.pop("port", None) or free_port()  # a port: beside another gateway
        settings.setdefault("poll_interval", 0.02)
        if "candidates" in settings:
            settings["upstream_candidates"] = tuple(settings.pop("candidates"))
        upstream = settings.pop("upstream_override", upstream)
        settings.setdefault("control_socket", os.path.join(self.dir, "control.sock"))
        self.config = GatewayConfig(
            upstream=upstream, host="127.0.0.1", port=self.port, log_level="warning", **settings
        )
        self.server = GatewayServer(self.config)
        stop_promptly(self.server.public)
        stop_promptly(self.server.control)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.server.serve(signals=False))

    def start(self) -> GatewayThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not (self.server.public.started and self.server.control.started):
            assert time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.01)
        return self

    def stop(self, grace: float = 2.0) -> None:
        """Stop as SIGTERM does, letting requests in flight finish for `grace` seconds (a real
        gateway gives them its drain timeout: a replacement's old gateway finishes its streams)."""
        if self.loop is not None:
            self.server.public.config.timeout_graceful_shutdown = grace
            self.loop.call_soon_threadsafe(self.server.stop)
        self.thread.join(timeout=15)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def gateway(self):
        return self.server.gateway

    def wait(self, predicate: Any, timeout: float = 30.0) -> None:
        """Poll `predicate(gateway)` until true (the timeout only bounds a failing test: a
        loaded machine, e.g. `make check`'s 4 workers on 2 cores, may take seconds)."""
        deadline = time.monotonic() + timeout
        while not predicate(self.gateway):
            assert time.monotonic() < deadline, "condition not reached"
            time.sleep(0.005)


class LocalExec:
    """Stands in for a Docker container: runs the control tool as a local process."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.commands: list[list[str]] = []

    def exec_run(self, cmd: list[str], demux: bool = True) -> tuple[int, tuple[bytes, bytes]]:
        self.commands.append(list(cmd))
        assert cmd[:3] == ["python3", "-m", "composer.gateway.ctl"]
        env = {**os.environ, "PYTHONPATH": str(REPO), "GATEWAY_CONTROL_SOCKET": self.socket_path}
        done = subprocess.run(
            [sys.executable, *cmd[1:]], capture_output=True, env=env, timeout=120, check=False
        )
        return done.returncode, (done.stdout, done.stderr)


class InProcessExec(LocalExec):
    """LocalExec without the process start: the control tool's verb runs in this process
    (`ctl.forward`, what `ctl session` runs per line), so a call takes milliseconds even on
    a loaded machine. For tests of timing around the calls, such as lease renewals."""

    def exec_run(self, cmd: list[str], demux: bool = True) -> tuple[int, tuple[bytes, bytes]]:
        from composer.gateway.ctl import forward

        self.commands.append(list(cmd))
        assert cmd[:3] == ["python3", "-m", "composer.gateway.ctl"]
        code, reply = forward(self.socket_path, *cmd[3:])
        return code, (json.dumps(reply).encode(), b"")


def sse_request(tag: str, **extra: Any) -> bytes:
    """A chat request body the fake backend understands."""
    return json.dumps({"model": SERVED, "stream": True, "tag": tag, **extra}).encode()


class DroppingBackend:
    """A raw HTTP backend: `/health` and `/version` answer 200 (the connection kept alive);
    every other request is read whole and its connection closed without an answer (a backend
    that crashes on it). Records each such request as "METHOD target body"."""

    def __init__(self) -> None:
        import socketserver

        self.arrivals: list[str] = []
        owner = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                while True:
                    line = self.rfile.readline()
                    if not line:
                        return
                    length = 0
                    while (header := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                        name, _, value = header.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    body = self.rfile.read(length)
                    method, target = line.split()[:2]
                    if target in (b"/health", b"/version"):
                        self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                        continue
                    owner.arrivals.append(f"{method.decode()} {target.decode()} {body.decode()}")
                    return  # closed without an answer

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    def start(self) -> DroppingBackend:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"
