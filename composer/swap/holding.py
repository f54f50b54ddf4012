"""The gateway's side of a swap: clients wait, nothing they send is refused or cut.

A swap first drains the gateway: requests in flight finish (bounded by the drain timeout;
what it cuts is counted), new ones are held. The hold's lease is renewed while the swap runs,
and the hold is tethered to this process (a `ctl session` `docker exec` whose stdin stays
open), so a swap that dies, even by `kill -9`, leaves no hold behind; that session carries
every control call of the swap. The gate and the warm-up carry the hold's probe token and
reach the new variant before any client; then the held requests flow, in arrival order, to
what serves: the new variant, or the previous one after a rollback.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from composer.engine import retry
from composer.engine.containers import gateway_container
from composer.engine.health import tls_context
from composer.engine.retry import Pending
from composer.errors import GatewayControlError, SwapFailed
from composer.gateway import GatewayControl, Tether
from composer.gateway.wire import PROBE_HEADER

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

    from composer.engine.gate import GateTarget
    from composer.stack.model import Stack

LEASE_S = 60.0
RENEW_EVERY_S = LEASE_S / retry.HOLD_RENEWAL_SHARE
READY_TIMEOUT_S = 30.0


WARMUP_PROMPT = "Write one sentence about the weather."


@dataclass(frozen=True)
class Drained:
    """What draining the gateway did before the old variant stopped."""

    drained: int
    cut: int
    seconds: float
    continued: int = 0  # streams paused to go on on the next variant
    refused: int = 0  # streams in flight it could not continue (they drained or were cut)


class SwapHold:
    """One swap's hold on the gateway: drain, keep the lease, let the gate through, release."""

    def __init__(
        self,
        control: GatewayControl,
        drain_timeout: float,
        say: Callable[[str], None],
        target: str = "",
        waiting: Callable[[str], None] | None = None,
        context: int | None = None,
    ) -> None:
        self.control = control
        self.context = context  # the next variant's max_model_len: a longer stream drains
        self.drain_timeout = drain_timeout
        self.say = say
        # the updating progress line: the drain's `draining (1 in flight, 8 s of 60 s)`
        self.waiting = waiting
        self.target = target  # the variant the swap brings in (the gateway's switch log shows it)
        self.token = secrets.token_urlsafe(32)
        # unique per swap: the tether releases this owner's holds, nobody else's
        self.owner = f"compose-spec up (pid {os.getpid()}, {secrets.token_hex(3)})"
        self.hold_id: str | None = None
        self._tether: Tether | None = None
        self._tethered = False  # tried: a target that cannot keep a stdin open gives None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        """What the gate's and the warm-up's requests carry to pass the hold."""
        return ((PROBE_HEADER, self.token),)

    def connect(self) -> None:
        """Open the tether unless it is open, then ask the state; GatewayControlError without an answer."""
        if not self._tethered:
            self._tether = self.control.tether(self.owner)
            self._tethered = True
        self.control.state()

    def begin(self, continue_streams: bool = False, gateway_leaving: bool = False) -> Drained:
        """Hold new requests and wait for those in flight (cut at the drain timeout); eligible streams
        pause to go on on the next variant at once (`continue_streams`), else at the timeout unless
        `gateway_leaving` (this gateway is replaced next)."""
        if not self._tethered:
            self._tethered = True
            try:
                self._tether = self.control.tether(self.owner)
            except GatewayControlError as err:
                self.say(f"the hold is not tethered to this process ({err}); a crash leaves it for its lease")
        waiting = self.waiting
        report = self.control.drain(
            self.drain_timeout,
            LEASE_S,
            owner=self.owner,
            probe_token=self.token,
            target=self.target,
            progress=(lambda p: waiting(p.describe())) if waiting is not None else None,
            continue_streams=continue_streams,
            gateway_leaving=gateway_leaving,
            max_model_len=self.context,
        )
        self.hold_id = report.hold_id
        self._renewer = threading.Thread(target=self._renew, name="gateway-hold-renewer", daemon=True)
        self._renewer.start()
        return Drained(report.drained, report.cut, report.duration_s, report.continued, report.refused)

    def _renew(self) -> None:
        """Renew the lease a few times per lease until `end`; a failed renewal waits its turn."""

        def renew() -> None:
            if self._stop.is_set():
                return
            self.control.renew(self.hold_id or "", LEASE_S)
            raise Pending("renewed: again at the next turn")

        if not self._stop.wait(RENEW_EVERY_S):
            retry.renewal(RENEW_EVERY_S, self._stop, (GatewayControlError,))(renew)

    def end(self, serving: str | None = None, ok: bool | None = None, detail: str = "") -> str | None:
        """Release the held requests, telling the gateway what serves now and whether the swap
        worked; a note when the release failed (the lease ends it)."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        try:
            if self.hold_id is None:
                return None
            try:
                self.control.release(self.hold_id, serving=serving, ok=ok, detail=detail)
            except GatewayControlError as err:
                ends = "when its tether closes" if self._tether else f"with its lease ({LEASE_S:.0f}s)"
                return f"the gateway's hold could not be released ({err}); it ends {ends}"
            return None
        finally:
            self.close_tether()  # after the release: closing it releases what is left

    def close_tether(self) -> None:
        """Close the tether (the gateway releases what this swap's owner still holds)."""
        if self._tether is not None:
            with contextlib.suppress(Exception):
                self._tether.close()
            self._tether = None


def start_hold(
    stack: Stack,
    client: docker.DockerClient,
    drain_timeout: float,
    say: Callable[[str], None],
    target: str = "",
    container: Container | None = None,
    waiting: Callable[[str], None] | None = None,
) -> SwapHold:
    """A SwapHold on the stack's running gateway, once its control channel answers."""
    container = container or gateway_container(stack, client)
    if container is None:
        raise SwapFailed("the gateway container was not created")
    hold = SwapHold(GatewayControl(container), drain_timeout, say, target, waiting, stack.max_model_len)

    def failed(err: GatewayControlError) -> SwapFailed:
        logs = container.logs(tail=20).decode(errors="replace")
        return SwapFailed(f"the gateway does not answer its control channel: {err}", logs)

    def answers() -> None:
        try:
            hold.connect()
        except GatewayControlError as err:
            container.reload()
            if container.status in {"exited", "dead"}:
                raise failed(err) from err
            raise

    try:
        retry.control_ready(READY_TIMEOUT_S, (GatewayControlError,))(answers)
    except GatewayControlError as err:
        hold.close_tether()
        raise failed(err) from err
    return hold


class EarlyHold:
    """A SwapHold whose control session opens on a thread while `up` reads and plans. Nothing is
    held yet; `take` waits for it (None: no gateway ran), `drop` closes it when unused."""

    def __init__(self, open_hold: Callable[[], SwapHold | None]) -> None:
        self._opened: Future[SwapHold | None] = Future()
        self._settled = self._taken = False  # settled: taken or dropped

        def run() -> None:
            try:
                self._opened.set_result(open_hold())
            except Exception as err:  # raised by `take`, where the drain would have raised it
                self._opened.set_exception(err)

        threading.Thread(target=run, name="gateway-session-open", daemon=True).start()

    def take(self) -> SwapHold | None:
        """The opened hold (waits for the thread; None: no gateway ran); the error of opening it raised."""
        self._settled = self._taken = True
        return self._opened.result()

    def control(self) -> GatewayControl | None:
        """The opened session's control channel, to read before the swap takes it (None: none opened)."""
        hold = None if self._opened.exception() else self._opened.result()
        return hold.control if hold is not None and not self._settled else None

    def drop(self) -> None:
        """Close the session unless `take` handed it out (now or once the thread ends)."""
        if self._settled:
            return
        self._settled = True

        def close(opened: Future[SwapHold | None]) -> None:
            hold = None if opened.exception() else opened.result()
            if hold is not None and not self._taken:
                hold.close_tether()

        self._opened.add_done_callback(close)


def open_early(
    stack: Stack,
    client: docker.DockerClient,
    container_name: str,
    say: Callable[[str], None],
    target: str = "",
    waiting: Callable[[str], None] | None = None,
) -> EarlyHold:
    """Open the control session of the gateway `container_name` on a thread, if it runs."""

    from docker.errors import NotFound

    def open_hold() -> SwapHold | None:
        try:
            container = client.containers.get(container_name)
        except NotFound:
            return None
        if container.status != "running":
            return None
        timeout = stack.gateway.drain_timeout
        return start_hold(stack, client, timeout, say, target=target, container=container, waiting=waiting)

    return EarlyHold(open_hold)


def warm_up(target: GateTarget, requests: int) -> list[float]:
    """Send `requests` short completions past the hold; the seconds each one took."""
    headers = {**dict(target.headers)}
    if target.api_key:
        headers["Authorization"] = f"Bearer {target.api_key}"
    body = {"model": target.served_name, "prompt": WARMUP_PROMPT, "max_tokens": 16, "temperature": 0}
    took = []
    timeout = httpx.Timeout(300.0, connect=2.0)
    with httpx.Client(timeout=timeout, headers=headers, trust_env=False, verify=tls_context()) as http:
        for _ in range(requests):
            began = time.monotonic()
            response = http.post(f"{target.url}/v1/completions", json=body)
            response.raise_for_status()
            took.append(time.monotonic() - began)
    return took
