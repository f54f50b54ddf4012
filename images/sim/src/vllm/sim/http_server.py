"""The HTTP surface: health, models, completions (SSE streaming), metrics, sleep routes."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socket import AF_INET6
from typing import Any
from urllib.parse import parse_qs, urlsplit

from vllm.sim.engine import Engine
from vllm.sim.logs import VllmLog
from vllm.sim.metrics import Metrics
from vllm.sim.openai_api import ApiError, ResponseBuilder, parse_request

GUARDED_PREFIXES = ("/v1", "/v2", "/inference")
SLEEP_STATE_BY_LEVEL = {1: "weights_offloaded", 2: "discard_all"}


@dataclass
class ServerState:
    """Everything request handlers share."""

    served_names: list[str]
    model_root: str
    max_model_len: int
    api_key: str | None
    engine: Engine
    metrics: Metrics
    log: VllmLog
    sleep_routes: bool
    time_scale: float
    created: int = 0


class Handler(BaseHTTPRequestHandler):
    """One HTTP/1.1 connection; routes by path."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    state: ServerState  # set on the subclass made by make_server
    _body: bytes = b""

    # ---- plumbing -------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr log; access lines are written in uvicorn's style."""

    def _access(self, status: int) -> None:
        host, port = self.client_address[:2]
        phrase = self.responses.get(status, ("",))[0]
        self.state.log.info(
            "launcher.py:46",
            f'{host}:{port} - "{self.command} {self.path} {self.request_version}" {status} {phrase}',
        )

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response_only(status)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-length", str(len(body)))
        if body:
            self.send_header("content-type", content_type)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self._access(status)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode())

    def _read_body(self) -> bytes:
        """Consume the request body (always, so keep-alive connections stay in sync)."""
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _read_json(self) -> Any:
        raw = self._body
        try:
            return json.loads(raw or b"{}")
        except ValueError as err:
            raise ApiError(400, f"Invalid JSON body: {err}") from err

    def _authorized(self, path: str) -> bool:
        key = self.state.api_key
        if not key or not path.startswith(GUARDED_PREFIXES):
            return True
        return self.headers.get("authorization", "") == f"Bearer {key}"

    def _route(self) -> tuple[str, dict[str, list[str]]]:
        parts = urlsplit(self.path)
        return parts.path.rstrip("/") or "/", parse_qs(parts.query)

    # ---- verbs ----------------------------------------------------------------------
    def do_GET(self) -> None:
        path, _ = self._route()
        if not self._authorized(path):
            self._json(401, {"error": "Unauthorized"})
        elif path == "/health":
            self._send(200, b"")
        elif path == "/v1/models":
            self._json(200, self._models())
        elif path == "/metrics":
            self._send(200, self.state.metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/version":
            from vllm.version import __version__

            self._json(200, {"version": __version__})
        elif path == "/is_sleeping" and self.state.sleep_routes:
            self._json(200, {"is_sleeping": not self.state.engine.awake.is_set()})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        self._body = self._read_body()
        path, query = self._route()
        if not self._authorized(path):
            self._json(401, {"error": "Unauthorized"})
            return
        try:
            if path in ("/v1/chat/completions", "/v1/completions"):
                self._completion(chat=path.endswith("chat/completions"))
            elif path == "/sleep" and self.state.sleep_routes:
                self._sleep(int((query.get("level") or ["1"])[0]))
            elif path == "/wake_up" and self.state.sleep_routes:
                self._wake_up()
            else:
                self._json(404, {"detail": "Not Found"})
        except ApiError as err:
            self._json(err.status, err.body())

    # ---- handlers -------------------------------------------------------------------
    def _models(self) -> dict[str, Any]:
        data = [
            {
                "id": name,
                "object": "model",
                "created": self.state.created,
                "owned_by": "vllm",
                "root": self.state.model_root,
                "parent": None,
                "max_model_len": self.state.max_model_len,
                "permission": [],
            }
            for name in self.state.served_names
        ]
        return {"object": "list", "data": data}

    def _completion(self, chat: bool) -> None:
        body = self._read_json()
        if not isinstance(body, dict):
            raise ApiError(400, "request body must be a JSON object")
        request = parse_request(body, chat, self.state.served_names, self.state.max_model_len)
        builder = ResponseBuilder(request)
        steps = self.state.engine.generate(request.gen)
        if not request.stream:
            pieces: list[str] = []
            finish = "length"
            for step in steps:
                pieces.extend(step.tokens)
                finish = step.finish_reason or finish
            self._json(200, builder.full("".join(pieces), finish, len(pieces)))
            return
        self._stream(builder, steps, request.chat, request.include_usage)

    def _stream(self, builder: ResponseBuilder, steps: Any, chat: bool, usage: bool) -> None:
        self.send_response_only(200)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self._access(200)
        generated = 0
        try:
            if chat:
                self._event(builder.chunk(None, None, role=True))
            for step in steps:
                generated += len(step.tokens)
                self._event(builder.chunk("".join(step.tokens), step.finish_reason))
            if usage:
                self._event(builder.usage_chunk(generated))
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            steps.close()
            self.close_connection = True

    def _event(self, payload: dict[str, Any]) -> None:
        self._chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _sleep(self, level: int) -> None:
        if level not in SLEEP_STATE_BY_LEVEL:
            raise ApiError(400, f"Invalid sleep level {level}; expected 1 or 2", param="level")
        started = time.monotonic()
        self.state.engine.awake.clear()
        time.sleep(0.2 / self.state.time_scale)
        with self.state.metrics.lock:
            self.state.metrics.sleep_state = SLEEP_STATE_BY_LEVEL[level]
        self.state.log.info(
            "gpu_worker.py:117", f"It took {time.monotonic() - started:.6f} seconds to fall asleep."
        )
        self._send(200, b"")

    def _wake_up(self) -> None:
        started = time.monotonic()
        if not self.state.engine.awake.is_set():
            time.sleep(0.5 / self.state.time_scale)
        with self.state.metrics.lock:
            self.state.metrics.sleep_state = "awake"
        self.state.engine.awake.set()
        self.state.log.info(
            "gpu_worker.py:149", f"It took {time.monotonic() - started:.6f} seconds to wake up."
        )
        self._send(200, b"")


class SimHTTPServer(ThreadingHTTPServer):
    """Threaded server whose worker threads never block shutdown."""

    daemon_threads = True
    allow_reuse_address = True


def make_server(host: str, port: int, state: ServerState) -> SimHTTPServer:
    """Bind the listening socket (the port opens only now, once the engine is ready)."""
    handler = type("BoundHandler", (Handler,), {"state": state})
    server_class = SimHTTPServer
    if ":" in host:
        server_class = type("SimHTTPServer6", (SimHTTPServer,), {"address_family": AF_INET6})
    return server_class((host, port), handler)
