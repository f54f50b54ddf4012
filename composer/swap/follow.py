"""`compose-spec follow`: run the switches the gateway asks for, on the host.

The gateway owns no Docker access: with `[gateway] switch_on_model = true` or `policy = "auto"`
it raises switch demands; this loop long-polls them (`GatewayControl.next_demand`), runs the
same gated `up` as the CLI and reports the outcome (`report_serving`), which releases or refuses
the requests waiting for it, and what Docker shows serving at start, every 30 s and before each
demand. A switch never replaces the gateway (differing settings are only reported); a gateway
replaced meanwhile is found again. `stop` (SIGTERM, Ctrl-C) ends it after a running switch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from docker.errors import DockerException

from composer.errors import ComposerError, GatewayControlError, Interrupted, SwapFailed
from composer.gateway.config import LIVE
from composer.gateway.host.client import GatewayControl, SwitchDemand
from composer.render.gateway import build_gateway_spec
from composer.render.spec import resolve
from composer.stack.model import Stack
from composer.swap import snapshot
from composer.swap.entry import up_set
from composer.swap.gateway_change import container_env
from composer.swap.outcome import UpOptions

if TYPE_CHECKING:
    import docker

RETRY_S = 2.0  # pause after the gateway did not answer
SYNC_EVERY_S = 30.0  # how often the serving variant is read from Docker between demands


@dataclass(frozen=True)
class FollowEvent:
    """One decision of the follow loop."""

    event: str  # serving, switch, switched, failed, refused, gateway
    variant: str | None
    reason: str
    seconds: float | None = None
    details: dict[str, object] = field(default_factory=dict)

    def line(self) -> str:
        """The event as one log line."""
        took = f" ({self.seconds:.1f}s)" if self.seconds is not None else ""
        return f"{self.event} {self.variant or '-'}{took}: {self.reason}"

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class Follower:
    """Waits for the gateway's demands and runs them through `up`."""

    stack: Stack
    client: docker.DockerClient
    options: UpOptions
    emit: Callable[[FollowEvent], None]
    stop: threading.Event
    reported: str | None = None  # what the gateway was last told serves
    switches: int = 0

    def __post_init__(self) -> None:
        self.options = replace(self.options, by="follow")  # its swaps say so in the history

    def _gateway(self) -> object:
        try:
            container = snapshot.take(self.stack, self.client, ask_sleeping=False).gateway
        except DockerException as err:
            raise GatewayControlError("demand", f"Docker did not answer: {err}") from err
        if container is None or container.status != "running":
            raise GatewayControlError("demand", "the gateway container is not running")
        return container

    def check_settings(self) -> None:
        """Say when the running gateway's settings differ from this stack's (never applied here)."""
        container = self._gateway()
        try:  # what it was given in place wins over its container's environment
            reported = GatewayControl(container).state().raw.get("settings")
        except ComposerError:
            reported = None
        differ = settings_drift(self.stack, container, reported)
        if differ:
            why = f"the gateway runs with other settings than this stack ({', '.join(differ)}): "
            self.emit(FollowEvent("gateway", None, why + "follow keeps it; `compose-spec up` applies them"))

    def _report(
        self, control: GatewayControl, serving: str | None, demand: SwitchDemand, ok: bool, detail: str
    ) -> GatewayControl:
        """Report a switch's outcome; a gateway replaced meanwhile is found again and told."""
        try:
            control.report_serving(serving, demand.id, ok=ok, detail=detail, follower=True)
        except (GatewayControlError, DockerException):
            control = GatewayControl(self._gateway())
            control.report_serving(serving, demand.id, ok=ok, detail=detail, follower=True)
        return control

    def _serving_now(self) -> str | None:
        running = snapshot.take(self.stack, self.client).current
        return running.variant if running else None

    def sync(self, control: GatewayControl) -> None:
        """Tell the gateway what serves when it changed since the last report."""
        serving = self._serving_now()
        if serving is not None and serving != self.reported:
            control.report_serving(serving, follower=True)
            self.reported = serving
            self.emit(FollowEvent("serving", serving, "read from Docker"))

    def handle(self, control: GatewayControl, demand: SwitchDemand) -> GatewayControl:
        """Run one demand through `up` and report how it ended (to the gateway that runs then)."""
        known = self.stack.variants.get(demand.variant)
        refused = (
            known.refused if known else f"unknown variant (known: {', '.join(sorted(self.stack.variants))})"
        )
        if refused:
            control.report_serving(self.reported, demand.id, ok=False, detail=refused, follower=True)
            self.emit(FollowEvent("refused", demand.variant, refused))
            return control
        serving = self._serving_now()
        if serving == demand.variant:  # a by-hand `up` since the last sync: nothing to switch
            control.report_serving(serving, demand.id, ok=True, detail="already serving", follower=True)
            self.reported = serving
            self.emit(FollowEvent("serving", serving, "already serving (read from Docker): no switch"))
            return control
        self.check_settings()
        self.emit(FollowEvent("switch", demand.variant, f"{demand.source}: {demand.reason}"))
        began = time.monotonic()
        try:
            result = up_set(
                self.stack,
                [demand.variant],
                client=self.client,
                options=replace(self.options, keep_gateway=True),
            )
        except ComposerError as err:
            serving = self._serving_now()
            control = self._report(control, serving, demand, False, str(err).splitlines()[0])
            self.reported = serving
            rolled = isinstance(err, SwapFailed) and err.rolled_back
            after = f"rolled back to {serving}" if rolled else f"serving {serving or 'nothing'}"
            why = f"{str(err).splitlines()[0]} ({after})"
            self.emit(FollowEvent("failed", demand.variant, why, time.monotonic() - began))
            if isinstance(err, Interrupted) or isinstance(err.__cause__, KeyboardInterrupt):
                # SIGTERM or Ctrl-C during the switch (rolled back): stop after it
                self.stop.set()
            return control
        control = self._report(control, demand.variant, demand, True, result.outcome)
        self.reported = demand.variant
        self.switches += 1
        how = f"{result.outcome} from {result.previous or 'nothing'}"
        timings = {"timings": {k: round(v, 3) for k, v in result.timings.items()}}
        self.emit(FollowEvent("switched", demand.variant, how, time.monotonic() - began, timings))
        return control

    def run(self, max_switches: int | None = None) -> int:
        """Follow until `stop` is set (or `max_switches` switches ran); returns the switches run."""
        last_sync = 0.0
        control: GatewayControl | None = None
        while not self.stop.is_set():
            try:
                if control is None:
                    control = GatewayControl(self._gateway())
                    self.reported = None
                    self.check_settings()
                if time.monotonic() - last_sync >= SYNC_EVERY_S:
                    self.sync(control)
                    last_sync = time.monotonic()
                demand = control.next_demand()
                if demand is not None:
                    control = self.handle(control, demand)
                    last_sync = time.monotonic()
                    if max_switches is not None and self.switches >= max_switches:
                        break
            except (GatewayControlError, DockerException) as err:
                self.emit(FollowEvent("gateway", None, f"{err}; retrying in {RETRY_S:.0f}s"))
                control = None
                last_sync = 0.0
                self.stop.wait(RETRY_S)
        return self.switches


def settings_drift(stack: Stack, gateway: Any, reported: object = None) -> list[str]:
    """The `[gateway]` keys whose value in the running gateway (its environment, with the settings
    it reports in effect, `reported`, over it) differs from what this stack renders."""
    spec = build_gateway_spec(stack)
    running = container_env(gateway)
    if isinstance(reported, dict):
        running.update({name: str(reported.get(name, "")) for name in LIVE})
    ignored = {"GATEWAY_UPSTREAM_CANDIDATES", "GATEWAY_STATE_DIR", "GATEWAY_PORT"}
    return sorted(
        name.removeprefix("GATEWAY_").lower()
        for name, value in (spec.environment if spec else ())
        if name.startswith("GATEWAY_") and name not in ignored and running.get(name) != resolve(value)
    )


def follow(
    stack: Stack,
    *,
    client: docker.DockerClient,
    options: UpOptions | None = None,
    emit: Callable[[FollowEvent], None],
    stop: threading.Event | None = None,
    max_switches: int | None = None,
) -> int:
    """Run the gateway's switch demands until stopped; returns how many switches ran."""
    follower = Follower(stack, client, options or UpOptions(), emit, stop or threading.Event())
    return follower.run(max_switches)
