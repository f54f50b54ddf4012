"""Host-side control of a gateway container, through `docker exec` (Docker SDK `exec_run`).

Each call runs `python3 -m composer.gateway.ctl METHOD PATH [BODY]` (a route of
`composer.gateway.control.app`) in the container and parses the JSON it prints: no port, so only who
can exec into the container controls it. Failures raise `GatewayControlError`. Long waits
(drain, wait-ready) are split into calls of at most `CALL_WAIT_S` seconds so no exec outlives a
Docker client's read timeout (60 s by default); a backend call (sleep, wake_up) is one exec:
give the Docker client a timeout above `timeout_s`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import MISSING, dataclass, field, fields
from socket import SHUT_RDWR
from typing import Any, Protocol, TypeVar, cast

from composer.errors import GatewayControlError
from composer.gateway.config import DEFAULT_CONTROL_SOCKET
from composer.gateway.wire import SINGLE, DrainReport

_T = TypeVar("_T")
CALL_WAIT_S = 20.0
# How often a drain with a progress callback asks the gateway what still runs.
PROGRESS_EVERY_S = 1.0
CTL = ("python3", "-m", "composer.gateway.ctl")
# How long `tether` waits for a `ctl session`'s hello before it takes the gateway for an older
# image (a plain tether); the session's Python starts in about 0.3 s.
SESSION_HELLO_S = 10.0
# The gateway's state and each URL's `/is_sleeping` in one exec, whatever the number of URLs.
_LOOK = """
import json, sys, httpx
from composer.gateway.ctl import call
out = {"state": None, "sleeping": {}}
try:
    code, out["state"] = call(sys.argv[1], "GET", "/state", None)
except Exception as err:
    out["error"] = f"{type(err).__name__}: {err}"
for url in sys.argv[2:]:
    try:
        reply = httpx.get(url + "/is_sleeping", timeout=2.0, trust_env=False)
        out["sleeping"][url] = bool(reply.json().get("is_sleeping")) if reply.status_code == 200 else None
    except Exception:
        out["sleeping"][url] = None
print(json.dumps(out))
"""


class ExecTarget(Protocol):
    """What the client needs from a container: Docker SDK's `Container.exec_run(cmd, demux=True)`."""

    def exec_run(self, cmd: Sequence[str], demux: bool = ...) -> Any: ...


@dataclass(frozen=True)
class HoldInfo:
    """A control hold: requests wait while it exists, until released or its lease runs out."""

    id: str
    lease_s: float
    expires_in_s: float
    owner: str = ""


@dataclass(frozen=True)
class DrainProgress:
    """A drain that still waits."""

    inflight: int
    elapsed_s: float
    timeout_s: float

    def describe(self) -> str:
        """`draining (1 in flight, 8 s of 60 s)`: the swap's progress line."""
        return f"draining ({self.inflight} in flight, {self.elapsed_s:.0f} s of {self.timeout_s:.0f} s)"


@dataclass(frozen=True)
class GatewayState:
    """The gateway as its control channel reports it (`raw` has every field)."""

    open: bool
    backend_ready: bool
    held: int
    inflight: int
    holds: tuple[HoldInfo, ...]
    raw: Mapping[str, Any] = field(repr=False)

    @property
    def upstream(self) -> str:
        """The single member's URL (an older gateway image reports it as `upstream`)."""
        single = next((u for u in self.upstreams if u.name == SINGLE), None)
        return single.url if single is not None else str(self.raw.get("upstream") or "")

    @property
    def follower_attached(self) -> bool | None:
        """True while a host's `compose-spec follow` long-polls (or did within 30 s); None: not said."""
        switching = self.raw.get("switching")
        attached = switching.get("follower_attached") if isinstance(switching, dict) else None
        return attached if isinstance(attached, bool) else None

    @property
    def live_set(self) -> frozenset[str]:
        """The names of the live set's members the gateway routes among (empty: its single
        member serves)."""
        return frozenset(u.name for u in self.upstreams if not u.leaving and u.name != SINGLE)

    @property
    def upstreams(self) -> tuple[UpstreamInfo, ...]:
        """Every member requests go to (the live set, or the single member named `SINGLE`),
        then those leaving with requests in flight."""
        items = self.raw.get("upstreams")
        items = items if isinstance(items, list) else []
        return tuple(_parse(UpstreamInfo, d) for d in items if isinstance(d, dict))


@dataclass(frozen=True)
class UpstreamInfo:
    """One live upstream as the gateway reports it (`leaving`: out of the set, draining)."""

    name: str
    variant: str
    url: str
    ready: bool = False
    outstanding: int = 0
    served: int = 0
    errors: int = 0
    requests: int = 0
    leaving: bool = False
    error: str = ""


@dataclass(frozen=True)
class UpstreamDrain:
    """How a drain of a departed live upstream ended: `done` when nothing is in flight."""

    name: str
    done: bool
    outstanding: int
    duration_s: float
    continued: int = 0  # its streams paused to go on on the other members
    refused: int = 0  # its streams that could not go on (they drain)


@dataclass(frozen=True)
class SwitchDemand:
    """A switch the gateway asks for: the variant, why, and who asked (`alias` or `auto`)."""

    id: str
    variant: str
    reason: str
    source: str


@dataclass(frozen=True)
class BackendReply:
    """A backend route called through the control channel."""

    status: int
    body: Any


def body_text(body: Any) -> str:
    """A reply body in words: vLLM's `detail` or OpenAI's `error.message`, else its JSON, cut short."""
    if isinstance(body, dict):
        error = body.get("error")
        message = body.get("detail") or (error.get("message") if isinstance(error, dict) else error)
        if isinstance(message, str) and message:
            return message
    text = body if isinstance(body, str) else json.dumps(body)
    return (text[:200] + "...") if len(text) > 200 else (text or "an empty body")


_CAST: dict[str, Callable[[Any], Any]] = {"str": str, "int": int, "float": float, "bool": bool}


def _parse(cls: type[_T], d: Mapping[str, Any], **given: Any) -> _T:
    """A reply's dataclass, each field cast to its type; KeyError for a missing field without default."""
    values = dict(given)
    for f in fields(cast(Any, cls)):
        if f.name not in given and (f.name in d or f.default is MISSING):
            values[f.name] = _CAST[str(f.type)](d[f.name])
    return cls(**values)


def _state(d: Mapping[str, Any]) -> GatewayState:
    holds = tuple(_parse(HoldInfo, h) for h in d.get("holds", []))
    return _parse(GatewayState, d, holds=holds, raw=dict(d))


def _settle(waiting: Future[dict[str, Any] | None], message: dict[str, Any] | None) -> None:
    with contextlib.suppress(InvalidStateError):  # answered already
        waiting.set_result(message)


class Tether:
    """An open `ctl tether`: closing it (or the death of this process) releases its owner's holds."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._raw = getattr(sock, "_sock", sock)  # docker-py hands a SocketIO over a socket

    def close(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            self._raw.shutdown(SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()


class SessionLost(Exception):
    """The `ctl session` ended; `ran` is False when it never ran the command (safe to redo)."""

    def __init__(self, ran: bool) -> None:
        super().__init__("the control session ended")
        self.ran = ran


class Session(Tether):
    """A tether that also forwards requests (`ctl session`): a swap's control channel is one exec."""

    def __init__(self, sock: Any) -> None:
        super().__init__(sock)
        self._write = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, Future[dict[str, Any] | None]] = {}
        self.greeted = threading.Event()  # the session said hello: it runs commands
        self.ended = threading.Event()
        self.settled = threading.Event()  # greeted or ended, whichever came first
        threading.Thread(target=self._read, name="gateway-control-session", daemon=True).start()

    def _read(self) -> None:
        from docker.utils.socket import frames_iter

        pending = b""
        try:
            for stream, data in frames_iter(self._sock, tty=False):
                if stream != 1:  # stderr: argparse's usage line of an older gateway
                    continue
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    self._dispatch(line)
        except Exception:  # the socket closed under the reader: the session ended
            return
        finally:
            self.ended.set()
            self.settled.set()
            with self._write:
                waiting = list(self._waiting.values())
            for reply in waiting:
                _settle(reply, None)

    def _dispatch(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        if "session" in message:
            if message.get("requests"):  # an older image's session takes argv: not this client's
                self.greeted.set()
            self.settled.set()
            return
        with self._write:
            ident = message.get("id")
            slot = self._waiting.get(ident) if isinstance(ident, int) else None
        if slot is not None:
            _settle(slot, message)

    def call(self, method: str, path: str, body: Mapping[str, Any] | None) -> tuple[int, dict[str, Any]]:
        """(exit code, reply) of one request; SessionLost when the session ended."""
        if self.ended.is_set():
            raise SessionLost(ran=False)
        ident = next(self._ids)
        waiting: Future[dict[str, Any] | None] = Future()
        line = (json.dumps({"id": ident, "method": method, "path": path, "body": body}) + "\n").encode()
        with self._write:
            if self.ended.is_set():  # the reader has already woken the calls it knew of
                raise SessionLost(ran=False)
            self._waiting[ident] = waiting
            try:
                self._raw.sendall(line)
            except OSError as err:
                del self._waiting[ident]
                raise SessionLost(ran=False) from err
        try:
            got = waiting.result()
        finally:
            with self._write:
                self._waiting.pop(ident, None)
        if got is None:
            raise SessionLost(ran=self.greeted.is_set())
        reply = got.get("reply")
        return int(got.get("code", 1)), reply if isinstance(reply, dict) else {}


class GatewayControl:
    """Hold, drain, release, route and backend calls on one gateway container."""

    def __init__(self, container: ExecTarget) -> None:
        self.container = container
        self.session: Session | None = None  # set by `tether`: calls go through it while it lasts

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """One request's reply, through the session while one lasts, else an exec."""
        verb = path.split("?", 1)[0].strip("/")
        session = self.session
        if session is not None and not session.ended.is_set():
            try:
                code, reply = session.call(method, path, body)
            except SessionLost as lost:
                if lost.ran:
                    raise GatewayControlError(verb, "the control session ended during the call") from lost
            else:
                return self._reply(verb, code, reply, json.dumps(reply), "")
        args = [method, path] + ([json.dumps(body)] if body is not None else [])
        code, out, err_out = self._exec(verb, [*CTL, *args])
        text, err_text = (b.decode(errors="replace").strip() for b in (out, err_out))
        try:
            reply = json.loads(text) if text else {}
        except ValueError:
            reply = {}
        return self._reply(verb, code, reply, text, err_text)

    def _exec(self, verb: str, cmd: list[str]) -> tuple[int, bytes, bytes]:
        try:
            result = self.container.exec_run(cmd, demux=True)
        except Exception as err:  # the Docker SDK raises several families
            raise GatewayControlError(verb, f"docker exec failed: {err}") from err
        code, output = result if isinstance(result, tuple) else (result.exit_code, result.output)
        out, err_out = output if isinstance(output, tuple) else (output, b"")
        return code, out or b"", err_out or b""

    @staticmethod
    def _reply(verb: str, code: int, reply: Any, text: str, err_text: str) -> dict[str, Any]:
        if code != 0:
            message = reply.get("error") if isinstance(reply, dict) else None
            raise GatewayControlError(
                verb, str(message or err_text or text or f"exit {code}"), code, text + err_text
            )
        if not isinstance(reply, dict):
            raise GatewayControlError(verb, f"unexpected reply: {body_text(text)}", 1, text)
        return reply

    def state(self) -> GatewayState:
        """Upstream, readiness, holds, held and in-flight counts."""
        return _state(self._call("GET", "/state"))

    def look(self, urls: Sequence[str]) -> tuple[GatewayState | None, dict[str, bool | None]]:
        """The gateway's state (None: not up yet) and each URL's `/is_sleeping` (None: no answer)."""
        cmd = ["python3", "-c", _LOOK, DEFAULT_CONTROL_SOCKET, *urls]
        code, out, _ = self._exec("look", cmd)
        try:
            reply = json.loads(out.decode(errors="replace"))
        except ValueError:
            reply = None
        if code != 0 or not isinstance(reply, dict):
            raise GatewayControlError("look", f"exit {code}: {out[:200]!r}", code or 1)
        state = reply.get("state")
        sleeping = {
            str(k): (None if v is None else bool(v)) for k, v in (reply.get("sleeping") or {}).items()
        }
        return (_state(state) if isinstance(state, dict) and "open" in state else None), sleeping

    def hold(self, lease_s: float, owner: str = "", probe_token: str = "") -> HoldInfo:
        """Set a hold that expires after `lease_s` unless renewed or released (`probe_token`: `drain`)."""
        body = {"lease_s": lease_s, "owner": owner, **({"probe_token": probe_token} if probe_token else {})}
        return _parse(HoldInfo, self._call("POST", "/hold", body)["hold"])

    def renew(self, hold_id: str, lease_s: float | None = None) -> HoldInfo:
        """Extend a hold's lease from now on."""
        body = {"id": hold_id, **({"lease_s": lease_s} if lease_s is not None else {})}
        return _parse(HoldInfo, self._call("POST", "/renew", body)["hold"])

    def release(
        self,
        hold_id: str | None = None,
        *,
        serving: str | None = None,
        ok: bool | None = None,
        detail: str = "",
    ) -> list[str]:
        """Remove one hold, or every hold; `serving`/`ok`/`detail`: how its switch ended (switch log)."""
        body: dict[str, Any] = {"id": hold_id} if hold_id else {}
        if serving:
            body["serving"] = serving
        if ok is not None or detail:
            body["detail"] = detail[:400]
        if serving or "detail" in body:
            body["ok"] = ok is not False
        return list(self._call("POST", "/release", body)["released"])

    def drain(
        self,
        timeout_s: float,
        lease_s: float,
        owner: str = "",
        probe_token: str = "",
        target: str = "",
        progress: Callable[[DrainProgress], None] | None = None,
        continue_streams: bool = False,
        gateway_leaving: bool = False,
        max_model_len: int | None = None,
    ) -> DrainReport:
        """Hold new requests and wait for in-flight ones; what is left at `timeout_s` is cut.

        `probe_token` in `PROBE_HEADER` passes the hold (the swap's gate); `target` starts a switch
        in the switch log. `continue_streams`: eligible streams pause at once and go on on the
        next variant (`max_model_len`: its context) after the release; else at the timeout
        instead of cut, unless `gateway_leaving`.
        """
        step = PROGRESS_EVERY_S if progress is not None else CALL_WAIT_S
        body = {
            "timeout_s": timeout_s,
            "lease_s": lease_s,
            "owner": owner,
            "wait_s": min(step, timeout_s + 3.0),
            "probe_token": probe_token or None,
            "target": target or None,
            "continue": continue_streams or None,
            "continue_at_timeout": False if gateway_leaving else None,
            "max_model_len": max_model_len,
        }
        reply = self._call("POST", "/drain", {k: v for k, v in body.items() if v is not None})
        while not reply.get("done"):
            if progress is not None and "inflight" in reply:
                progress(DrainProgress(int(reply["inflight"]), float(reply.get("elapsed_s", 0.0)), timeout_s))
            reply = self._call("GET", f"/drain/{reply['id']}?wait_s={step}")
        return _parse(DrainReport, reply)

    def apply_settings(self, settings: Mapping[str, str]) -> dict[str, str]:
        """Apply `config.LIVE` settings in place; returns those in effect. A refusal changes nothing."""
        return dict(self._call("PUT", "/settings", {"settings": dict(settings)})["settings"])

    def route(self, upstream: str, variant: str | None = None) -> str:
        """Forward to `upstream` from now on (held until it is ready), the single member, which
        serves `variant` when given; returns the previous URL."""
        single = {"url": upstream, **({"variant": variant} if variant else {})}
        try:
            return str(self._call("POST", "/upstreams", {"single": single})["previous"])
        except GatewayControlError as err:
            if "must be a JSON list" not in str(err):
                raise
        # a gateway image from before the single member was one of `upstreams`
        return str(self._call("POST", "/route", {"upstream": upstream})["previous"])

    def set_upstreams(
        self, upstreams: Sequence[Mapping[str, str]], single_variant: str | None = None
    ) -> tuple[UpstreamInfo, ...]:
        """Replace the live set with `[{name, variant, url}]`, gated already (`[]`: the single
        member, which serves `single_variant` when given)."""
        body: dict[str, Any] = {"upstreams": [dict(u) for u in upstreams]}
        if single_variant:
            body["single"] = {"variant": single_variant}
        reply = self._call("POST", "/upstreams", body)
        return tuple(_parse(UpstreamInfo, d) for d in reply.get("upstreams", []))

    def drain_upstream(
        self, name: str, timeout_s: float, continue_streams: bool = False, max_model_len: int | None = None
    ) -> UpstreamDrain:
        """Wait up to `timeout_s` until the live upstream `name`, left out of the set, has nothing
        in flight; `continue_streams`: its streams that fit in `max_model_len` go on elsewhere."""
        start = time.monotonic()
        continued = refused = 0
        while True:
            left = timeout_s - (time.monotonic() - start)
            body: dict[str, Any] = {"name": name, "wait_s": max(0.0, min(CALL_WAIT_S, left))}
            if continue_streams and not continued:
                body["continue"] = True
                if max_model_len is not None:
                    body["max_model_len"] = max_model_len
            reply = self._call("POST", "/upstreams/drain", body)
            continued += int(reply.get("continued", 0))
            refused += int(reply.get("refused", 0))
            if reply.get("done") or left <= CALL_WAIT_S:
                done, outstanding = bool(reply.get("done")), int(reply.get("outstanding", 0))
                return UpstreamDrain(name, done, outstanding, time.monotonic() - start, continued, refused)

    def wait_ready(self, timeout_s: float) -> bool:
        """Wait until the gateway sees its backend ready; False at the timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            reply = self._call("POST", "/wait-ready", {"timeout_s": max(0.0, min(CALL_WAIT_S, left))})
            if reply.get("ready") or left <= CALL_WAIT_S:
                return bool(reply.get("ready"))

    def backend(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | Sequence[tuple[str, str]] = (),
        body: Any = None,
        timeout_s: float = 300.0,
    ) -> BackendReply:
        """Call a backend route directly (dev routes such as /sleep are reachable only here)."""
        pairs = list(query.items()) if isinstance(query, Mapping) else list(query)
        call = {"method": method, "path": path, "query": [[n, v] for n, v in pairs], "timeout_s": timeout_s}
        if body is not None:
            call["json"] = body
        reply = self._call("POST", "/backend", call)
        return BackendReply(int(reply["status"]), reply.get("body"))

    def sleep(self, level: int = 1, timeout_s: float = 300.0, wait: bool = False) -> BackendReply:
        """`POST /sleep?level=N` on the backend (the level is a query parameter in vLLM);
        `wait`: `mode=wait`, it finishes what is in flight first (vLLM 0.17 and later)."""
        query = {"level": str(level), **({"mode": "wait"} if wait else {})}
        return self.backend("POST", "/sleep", query, timeout_s=timeout_s)

    def wake_up(self, tags: Sequence[str] = (), timeout_s: float = 300.0) -> BackendReply:
        """`POST /wake_up` (optionally `tags=weights|kv_cache`, repeated)."""
        return self.backend("POST", "/wake_up", [("tags", t) for t in tags], timeout_s=timeout_s)

    def is_sleeping(self) -> bool:
        """`GET /is_sleeping` -> the backend's own answer (`/health` is 200 while asleep)."""
        reply = self.backend("GET", "/is_sleeping", timeout_s=30.0)
        if reply.status != 200 or not isinstance(reply.body, dict):
            raise GatewayControlError(
                "backend", f"/is_sleeping answered {reply.status}: {body_text(reply.body)}"
            )
        return bool(reply.body.get("is_sleeping"))

    def next_demand(self, wait_s: float = CALL_WAIT_S) -> SwitchDemand | None:
        """The gateway's pending switch demand, waiting up to `wait_s` for one (one exec)."""
        reply = self._call("GET", f"/demand?wait_s={min(wait_s, CALL_WAIT_S)}")
        found = reply.get("demand")
        return _parse(SwitchDemand, found) if found else None

    def report_serving(
        self,
        variant: str | None,
        demand_id: str | None = None,
        ok: bool = True,
        detail: str = "",
        follower: bool = False,
    ) -> dict[str, Any]:
        """Tell the gateway which variant serves now and how the demand `demand_id` ended;
        `follower`: the report comes from `compose-spec follow` (a follower's contact)."""
        body = {
            "variant": variant or None,
            "demand": demand_id or None,
            "ok": ok,
            "detail": detail[:400],
            "follower": follower,
        }
        return dict(self._call("POST", "/serving", body).get("switching") or {})

    def report_probation(self, variant: str, state: str, until: float | None = None) -> bool:
        """Tell the gateway how the probation of the switch that brought `variant` in stands
        (`running` until `until`, epoch seconds, or how it ended): its status page shows it."""
        body = {"variant": variant, "probation": {"state": state, "until": until}}
        return bool(self._call("POST", "/serving", body).get("annotated"))

    def tether(self, owner: str) -> Tether | None:
        """Tie the holds of `owner` to this process: a `ctl session` exec (a plain `ctl tether` on
        an image without it) that releases them when its stdin closes; later calls go through it.
        None when the target cannot keep a stdin open (`kubectl exec`): the lease bounds the hold."""
        api = getattr(getattr(self.container, "client", None), "api", None)
        container_id = getattr(self.container, "id", None)
        if api is None or container_id is None:
            return None
        session = Session(self._exec_stdin(api, container_id, "session", owner))
        session.settled.wait(SESSION_HELLO_S)
        if not session.greeted.is_set() or session.ended.is_set():
            session.close()  # an older gateway image: no `session` verb
            return Tether(self._exec_stdin(api, container_id, "tether", owner))
        self.session = session
        return session

    def _exec_stdin(self, api: Any, container_id: str, verb: str, owner: str) -> Any:
        cmd = [*CTL, verb, f"--owner={owner}"]
        try:
            exec_id = api.exec_create(container_id, cmd, stdin=True, stdout=True, stderr=True)["Id"]
            return api.exec_start(exec_id, socket=True)
        except Exception as err:  # the Docker SDK raises several families
            raise GatewayControlError(verb, f"docker exec failed: {err}") from err
