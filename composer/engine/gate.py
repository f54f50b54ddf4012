"""Wait for a started container to become ready, watching the container as well as its API."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from composer.engine import bootlog, diagnose, retry
from composer.engine.health import Readiness, base_url, probe, tls_context
from composer.engine.retry import Pending
from composer.errors import HealthCheckFailed

if TYPE_CHECKING:
    from composer.engine.containers import RunningVariant
    from composer.engine.variant_container import VariantContainer
    from composer.stack.model import Stack

LOG_EVERY = 1.0


@dataclass(frozen=True)
class GateTarget:
    """Where a variant answers and what it must serve."""

    variant: str
    port: int
    bind_address: str
    served_name: str
    api_key: str | None
    headers: tuple[tuple[str, str], ...] = ()  # on every probe: the probe token passes a hold

    @property
    def url(self) -> str:
        return base_url(self.bind_address, self.port)


def running_target(stack: Stack, running: RunningVariant) -> GateTarget:
    """How to reach a running variant container's API (its labels first, then the stack)."""
    return GateTarget(
        variant=running.variant,
        port=running.port or stack.port,
        bind_address=stack.bind_address,
        served_name=running.served_name or stack.served_model_name,
        api_key=stack.api_key,
    )


def _http(target: GateTarget, timeout: float = 10.0) -> httpx.Client:
    return httpx.Client(
        timeout=httpx.Timeout(timeout, connect=0.5),
        headers=dict(target.headers),
        trust_env=False,
        verify=tls_context(),
    )


def probe_once(target: GateTarget) -> bool:
    """One readiness probe of a running variant."""
    with _http(target) as client:
        return probe(client, target.url, target.served_name, target.api_key).ready


def _failure(message: str, log: str) -> HealthCheckFailed:
    tail = bootlog.tail(log, 40)
    return HealthCheckFailed(message, tail, diagnose.hints(tail))


def wait_ready(
    container: VariantContainer,
    target: GateTarget,
    deadline: float,
    interval: float,
    waiting: Callable[[str], None],
    unreachable: Callable[[], None] | None = None,
) -> str:
    """Poll until ready and return the container log; fail at once when the container exits.
    `unreachable` (called at most once per LOG_EVERY while `/health` does not answer) raises
    when what stands between the probe and the container (the gateway) is gone."""
    started = time.monotonic()
    seen = {"log_read": 0.0, "stage": "starting container"}

    def attempt(client: httpx.Client) -> str:
        exited = container.exit_reason()
        if exited:
            raise _failure(exited, container.first_run_log())
        state: Readiness = probe(client, target.url, target.served_name, target.api_key)
        now = time.monotonic()
        if state.ready:
            return container.log()
        if state.fatal:
            raise _failure(state.detail, container.first_run_log())
        if now - seen["log_read"] >= LOG_EVERY:
            seen["log_read"] = now
            if unreachable is not None and state.step == "health":
                unreachable()
            seen["stage"] = bootlog.boot_stage(container.log())
            waiting(f"{target.variant}: {seen['stage']} ({now - started:.1f}s)")
        waited = f"not ready after {now - started:.0f}s"
        raise Pending(f"{waited} (last stage: {seen['stage']}; {state.step}: {state.detail})")

    with _http(target) as client:
        try:
            return retry.readiness(deadline, interval)(attempt, client)
        except Pending as timed_out:
            raise _failure(str(timed_out), container.log()) from None


PROBATION_FAILURES = 3  # failed `/health` probes in a row that end a variant's probation
PROBATION_INTERVAL = 0.5  # seconds between two looks at a variant on probation
PROBATION_PROBE_TIMEOUT = 2.0  # seconds one probe may take (a held one counts as failed)


def watch(
    container: VariantContainer,
    target: GateTarget,
    seconds: float,
    interval: float,
    unreachable: Callable[[], None] | None = None,
    *,
    probation: bool = False,
) -> None:
    """Watch a ready variant for `seconds`, every `interval` s, raising HealthCheckFailed with
    its log tail (`unreachable` first raises its own error when the gateway in between is
    gone). Settling: a crash or one failing `/health`. Probation (after a swap, with clients
    served): an exit or restart, or PROBATION_FAILURES failing `/health` probes in a row."""
    if seconds <= 0:
        return
    life, failed = (run_mark(container) if probation else None), [0]

    def settling(client: httpx.Client) -> None:
        exited = container.exit_reason()
        if not exited and _healthy(client, target):
            raise Pending("settling")
        if not exited:
            time.sleep(0.3)  # a dying server stops answering just before Docker sees it exit
            exited = container.exit_reason()
        if not exited and unreachable is not None:
            unreachable()
        exited = exited or "/health stopped answering 200"
        raise _failure(f"{exited} within {seconds:.1f}s after becoming ready", container.first_run_log())

    def on_probation(client: httpx.Client) -> None:
        reason = None if run_mark(container) == life else _ended(container)
        if reason is None and not _healthy(client, target):
            failed[0] += 1
            if failed[0] >= PROBATION_FAILURES:
                if unreachable is not None:
                    unreachable()
                reason = f"/health stopped answering 200 ({PROBATION_FAILURES} probes in a row)"
        elif reason is None:
            failed[0] = 0
        if reason is None:
            raise Pending("on probation")
        raise _failure(f"{reason} during its probation ({seconds:.0f}s)", container.log())

    with _http(target, PROBATION_PROBE_TIMEOUT if probation else 10.0) as client:
        retry.watch(seconds, interval)(on_probation if probation else settling, client)


watch_settled = watch
watch_probation = functools.partial(watch, probation=True)


def run_mark(container: VariantContainer) -> tuple[object, int, bool]:
    """What changes when the container's process ends: (State.StartedAt, RestartCount, running);
    a container Docker no longer knows gives (None, -1, False)."""
    from docker.errors import NotFound

    try:
        container.container.reload()
    except NotFound:
        return None, -1, False
    attrs = container.container.attrs
    state = attrs.get("State") or {}
    running = bool(state.get("Running")) and not state.get("Restarting")
    return state.get("StartedAt"), int(attrs.get("RestartCount") or 0), running


def _ended(container: VariantContainer) -> str:
    """Why a container's process ended, in words."""
    from docker.errors import NotFound

    try:
        return container.exit_reason() or "the container restarted"
    except NotFound:
        return "the container was removed"


def _healthy(client: httpx.Client, target: GateTarget) -> bool:
    try:
        return client.get(f"{target.url}/health").status_code == 200
    except httpx.TransportError:
        return False
