"""The HTTP surface: health, models, completions (SSE streaming), metrics, sleep routes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socket import AF_INET6
from typing import Any
from urllib.parse import parse_qs, urlsplit

from vllm.sim.engine import Engine
from vllm.sim.engine_types import EngineDeadError
from vllm.sim.logs import VllmLog
from vllm.sim.metrics import Metrics
from vllm.sim.openai_api import ApiError, ResponseBuilder, parse_request
from vllm.sim.sleep import SleepError, SleepMode

GUARDED_PREFIXES = ("/v1", "/v2", "/inference")


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
    sleep: SleepMode | None
    created: int = 0
    quiet_paths: frozenset[str] = frozenset()  # --disable-access-log-for-endpoints


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
        if self.path.split("?", 1)[0] in self.state.quiet_paths:  # vLLM's UvicornAccessLogFilter
            return
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
            self._send(503 if self.state.engine.dead else 200, b"")
        elif path == "/v1/models":
            self._json(200, self._models())
        elif path == "/metrics":
            self._send(200, self.state.metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/version":
            from vllm.version import __version__

            self._json(200, {"version": __version__})
        elif path == "/is_sleeping" and self.state.sleep is not None:
            self.state.log.info("api_router.py:68", "check whether the engine is sleeping")
            self._json(200, {"is_sleeping": self.state.sleep.is_sleeping})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        self._body = self._read_body()
        path, query = self._route()
        if not self._authorized(path):
            self._json(401, {"error": "Unauthorized"})
            return
        sleep = self.state.sleep
        try:
            if path in ("/v1/chat/completions", "/v1/completions"):
                self._completion(chat=path.endswith("chat/completions"))
            elif path == "/sleep" and sleep is not None:
                # The level and mode come from the query string only (a body is ignored).
                level = (query.get("level") or ["1"])[0]
                if not level.strip().lstrip("-").isdigit():
                    raise ApiError(400, f"Invalid sleep level {level!r}; expected 1 or 2", param="level")
                sleep.sleep(int(level), (query.get("mode") or ["abort"])[0])
                self._send(200, b"")
            elif path == "/wake_up" and sleep is not None:
                sleep.wake_up(query.get("tags") or None)
                self._send(200, b"")
            elif path == "/collective_rpc" and sleep is not None:
                self._collective_rpc(sleep)
            else:
                self._json(404, {"detail": "Not Found"})
        except ApiError as err:
            self._json(err.status, err.body())
        except SleepError as err:
            self._json(err.status, ApiError(err.status, str(err)).body())
        except EngineDeadError as err:
            self._json(500, ApiError(500, str(err), "InternalServerError").body())

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
        self.state.engine.check_alive()
        builder = ResponseBuilder(request)
        steps = self.state.engine.generate(request.gen)
        if not request.stream:
            pieces: list[str] = []
            ids: list[int] = []
            finish = "length"
            for step in steps:
                pieces.extend(step.tokens)
                ids.extend(step.token_ids)
                finish = step.finish_reason or finish
            self._json(200, builder.full("".join(pieces), finish, len(pieces), ids))
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
        try:
            self._stream_events(builder, steps, chat, usage)
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            steps.close()
            self.close_connection = True

    def _stream_events(self, builder: ResponseBuilder, steps: Any, chat: bool, usage: bool) -> None:
        generated = 0
        try:
            if chat:
                self._event(builder.chunk(None, None, role=True))
            for step in steps:
                generated += len(step.tokens)
                self._event(builder.chunk("".join(step.tokens), step.finish_reason, ids=step.token_ids))
            if usage:
                self._event(builder.usage_chunk(generated))
        except EngineDeadError as err:
            error = {"object": "error", "message": str(err), "type": "InternalServerError", "code": 500}
            self._event({"error": error})

    def _event(self, payload: dict[str, Any]) -> None:
        self._chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _collective_rpc(self, sleep: SleepMode) -> None:
        body = self._read_json()
        method = body.get("method") if isinstance(body, dict) else None
        if not isinstance(method, str) or not method:
            raise ApiError(400, "Missing 'method' in request body", param="method")
        self._json(200, {"results": sleep.collective_rpc(method)})


class SimHTTPServer(ThreadingHTTPServer):
    """Threaded server whose worker threads never block shutdown."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 2048  # uvicorn's backlog; the stdlib default of 5 drops bursts of clients


def make_server(host: str, port: int, state: ServerState) -> SimHTTPServer:
    """Bind the listening socket (the port opens only now, once the engine is ready)."""
    handler = type("BoundHandler", (Handler,), {"state": state})
    server_class = SimHTTPServer
    if ":" in host:
        server_class = type("SimHTTPServer6", (SimHTTPServer,), {"address_family": AF_INET6})
    return server_class((host, port), handler)
