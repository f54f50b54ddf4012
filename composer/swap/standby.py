"""Sleep standby in a swap: put the serving variant to sleep, wake a sleeping one, gate it.

A sleep-standby variant runs as its own compose service, `<service>-<variant>` (compose keeps
one container per service), routed to by its container name (`GatewayControl.route`); no
network change (a reconnected container gets a new address the gateway's pool would miss).
A container put to sleep gets restart policy `no` (`park`), set back when it serves again
(`unpark`): a reboot brings back only the serving variant. The sleep routes (`/sleep`,
`/wake_up`, `/is_sleeping`, `/metrics` for the acceptance check) go through the gateway's
control channel, never open to clients. Level 2 (`stack.sleep_level`) drops the weights, so
its wake also calls `/collective_rpc reload_weights`.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from composer.engine.containers import upstream_url
from composer.engine.images import sleep_waits
from composer.engine.variant_container import VariantContainer
from composer.errors import ComposerError, GatewayControlError, HealthCheckFailed
from composer.swap.holding import warm_up

if TYPE_CHECKING:
    from collections.abc import Callable

    from composer.engine.gate import GateTarget
    from composer.gateway.host.client import BackendReply, GatewayControl
    from composer.stack.model import Stack

ACCEPTANCE_WARMUP_REQUESTS = 2
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"


def park(container: VariantContainer) -> None:
    """A container put to sleep gets restart policy `no`: a reboot brings back only what
    serves (never fails the swap: without it, it restarts awake)."""
    _set_restart(container, "no")


def unpark(container: VariantContainer, policy: str) -> None:
    """A container that serves again gets the stack's restart policy back."""
    _set_restart(container, policy)


_updates: list[threading.Thread] = []  # restart-policy updates still running, in order


def _set_restart(container: VariantContainer, policy: str) -> None:
    """`docker update --restart` on a thread, off the clients' hold (about 15-30 ms each);
    updates run one after another in the order asked (`updates_done` waits for them)."""
    import contextlib

    from docker.errors import DockerException

    before = list(_updates)

    def update() -> None:
        for earlier in before:  # a park and an unpark of one container never swap places
            earlier.join()
        with contextlib.suppress(DockerException, AttributeError):
            container.container.update(restart_policy={"Name": policy})

    thread = threading.Thread(target=update, name="restart-policy", daemon=True)
    _updates.append(thread)
    thread.start()


def updates_done() -> None:
    """Wait for the restart-policy updates `park` and `unpark` started (a swap's end)."""
    while _updates:
        _updates.pop(0).join()


def _answered(call: Callable[[], BackendReply], failed: str, path: str, error: type[ComposerError]) -> None:
    """`call` through the control channel; `error(failed: why)` unless it answered 200."""
    try:
        reply = call()
    except GatewayControlError as err:
        raise error(f"{failed}: {err}") from err
    if reply.status != 200:
        raise error(f"{failed}: {path} answered {reply.status}: {str(reply.body)[:300]}")


def put_to_sleep(control: GatewayControl, variant: str, stack: Stack) -> None:
    """`POST /sleep?level=N` on the serving (drained) variant: the gateway still routes to it.
    With `mode=wait` where its vLLM (`GET /version`) has it: the engine may still be aborting
    the streams the drain let go (`doctor` names the risk where it cannot wait)."""
    failed = f"could not put {variant} to sleep"
    wait = sleep_waits(engine_version(control)) is True
    _answered(partial(control.sleep, stack.sleep_level, wait=wait), failed, "/sleep", ComposerError)


def engine_version(control: GatewayControl) -> str:
    """The serving engine's vLLM version (`GET /version`), "" when it does not say."""
    try:
        reply = control.backend("GET", "/version", timeout_s=10.0)
    except GatewayControlError:
        return ""
    version = reply.body.get("version") if reply.status == 200 and isinstance(reply.body, dict) else ""
    return version if isinstance(version, str) else ""


def wake(control: GatewayControl, container: VariantContainer, variant: str, stack: Stack) -> None:
    """Route the gateway to the sleeping container, then `POST /wake_up` on it."""
    control.route(upstream_url(container.name), variant)
    _answered(control.wake_up, f"the wake of {variant} failed", "/wake_up", HealthCheckFailed)
    if stack.sleep_level == 2:  # level 2 dropped the weights: read the checkpoint again
        reload = partial(control.backend, "POST", "/collective_rpc", body={"method": "reload_weights"})
        failed = f"reloading {variant}'s weights after its wake failed"
        _answered(reload, failed, "/collective_rpc", HealthCheckFailed)


def check_awake(control: GatewayControl, variant: str) -> None:
    """`/is_sleeping` must say false (`/health` is 200 while asleep)."""
    try:
        sleeping = control.is_sleeping()
    except GatewayControlError as err:
        raise HealthCheckFailed(f"{variant} after its wake: {err}") from err
    if sleeping:
        raise HealthCheckFailed(f"{variant} still reports is_sleeping after its wake")


def spec_counters(text: str) -> tuple[float, float]:
    """(draft tokens, accepted tokens) summed over every label set of a /metrics text."""
    totals = {DRAFT_TOKENS: 0.0, ACCEPTED_TOKENS: 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    return totals[DRAFT_TOKENS], totals[ACCEPTED_TOKENS]


def metrics_counters(control: GatewayControl) -> tuple[float, float]:
    """(drafted, accepted) from the backend's /metrics, through the gateway's control channel."""
    reply = control.backend("GET", "/metrics", timeout_s=30.0)
    if reply.status != 200 or not isinstance(reply.body, str):
        raise HealthCheckFailed(f"/metrics answered {reply.status}")
    try:
        return spec_counters(reply.body)
    except ValueError as err:
        raise HealthCheckFailed(f"/metrics could not be read: {err}") from err


def check_acceptance(
    counters: Callable[[], tuple[float, float]], target: GateTarget, floor: float, after: str = ""
) -> float:
    """Acceptance of the draft tokens over a short warm-up sent to `target`, from the (drafted,
    accepted) `counters` before and after: above `floor`, or HealthCheckFailed (`after`: wording)."""
    drafted_before, accepted_before = counters()
    warm_up(target, ACCEPTANCE_WARMUP_REQUESTS)
    drafted_after, accepted_after = counters()
    drafted = drafted_after - drafted_before
    if drafted <= 0:
        over = "the warm-up after its wake" if after else "its warm-up"
        raise HealthCheckFailed(f"{target.variant} drafted no tokens over {over}")
    rate = (accepted_after - accepted_before) / drafted
    if rate <= floor:
        broken = ": speculation is broken after the wake" if after else ""
        raise HealthCheckFailed(
            f"{target.variant} accepts {rate:.2f} of its draft tokens{after}, at or below the floor "
            f"{floor:.2f} (stack.acceptance_floor){broken}"
        )
    return rate
