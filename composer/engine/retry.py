"""Named retry and poll policies on tenacity: each wait's interval, deadline and the errors
that end it, written once. A polled step raises `Pending` until its condition holds; at the
deadline the last `Pending` is raised again or, for a quiet policy, its result given; any
other error ends the wait at once. Clocks and sleeps are injectable; the default sleep raises
KeyboardInterrupt when a stop cancels worker threads' waits (`composer.signals.pause`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_never,
    wait_fixed,
    wait_none,
)

from composer.signals import pause

Clock = Callable[[], float]
Sleep = Callable[[float], None]

# Seconds between two tries, of the policies below of the same name.
GPU_RELEASE_INTERVAL_S = 0.1
SERVICE_READINESS_INTERVAL_S = 0.5
KUBE_CONTROL_INTERVAL_S = 1.0
PORT_BACK_INTERVAL_S = 0.2
PORT_GAP_INTERVAL_S = 0.02  # the published port while the gateway's container is replaced
HOLD_RENEWAL_SHARE = 4  # a hold's lease is renewed this many times per lease


class Pending(Exception):
    """The polled condition does not hold yet: try again after the interval. `result` is what
    a wait that ends with an outcome gives back when its deadline passes on this attempt."""

    def __init__(self, detail: str, result: object = None) -> None:
        super().__init__(detail)
        self.result = result


def _stop_at(deadline: float | None, clock: Clock):
    if deadline is None:
        return stop_never

    def stop(_state: RetryCallState) -> bool:
        return clock() >= deadline

    return stop


def until(
    deadline: float | None,
    interval: float,
    *,
    retry_on: tuple[type[BaseException], ...] = (Pending,),
    clock: Clock = time.monotonic,
    sleep: Sleep = pause,
    on_wait: Callable[[BaseException], None] | None = None,
) -> Retrying:
    """Retry while the step raises one of `retry_on`, every `interval` s, until `clock()`
    reaches `deadline` (None: never); then raise the last error. `on_wait` gets each retried one."""

    def before_sleep(state: RetryCallState) -> None:
        if on_wait is not None and state.outcome is not None:
            on_wait(state.outcome.exception())

    return Retrying(
        retry=retry_if_exception_type(retry_on),
        wait=wait_fixed(interval) if interval > 0 else wait_none(),
        stop=_stop_at(deadline, clock),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )


def within(timeout: float, interval: float, *, clock: Clock = time.monotonic, **options: Any) -> Retrying:
    """`until` a deadline `timeout` s from now (the same keyword options)."""
    return until(clock() + timeout, interval, clock=clock, **options)


def watch(
    seconds: float, interval: float, *, clock: Clock = time.monotonic, sleep: Sleep = pause
) -> Retrying:
    """Call the step every `interval` s for `seconds`: it raises `Pending` while all is well,
    anything else to end the watch with that error; the watch ends quietly at the deadline."""
    return _giving_last(interval, _stop_at(clock() + seconds, clock), sleep)


def renewal(interval: float, stopped: threading.Event, errors: tuple[type[BaseException], ...]) -> Retrying:
    """Every `interval` s until `stopped` is set (the sleep ends early when it is): the step
    raises `Pending` after each renewal; one of `errors` is tried again at the next turn."""
    return _giving_last(interval, lambda _state: stopped.is_set(), stopped.wait, (Pending, *errors))


def _giving_last(
    interval: float, stop: Any, sleep: Sleep, retry_on: tuple[type[BaseException], ...] = (Pending,)
) -> Retrying:
    """Retry while the step raises one of `retry_on`, every `interval` s until `stop`; then give
    the last `Pending`'s result (None after another error)."""

    def last_result(state: RetryCallState) -> object:
        error = state.outcome.exception() if state.outcome is not None else None
        return error.result if isinstance(error, Pending) else None

    return Retrying(
        retry=retry_if_exception_type(retry_on),
        wait=wait_fixed(interval),
        stop=stop,
        sleep=sleep,
        retry_error_callback=last_result,
    )


def published_refusal(*, sleep: Sleep = pause) -> Retrying:
    """A refused published port: asked 3 times, 0.2 s apart (a just-started proxy may not
    listen yet); gives the last `Pending`'s result."""
    return _giving_last(0.2, stop_after_attempt(3), sleep)


def _answering(interval: float) -> Callable[[float, tuple[type[BaseException], ...]], Retrying]:
    """A control channel's policy: asked every `interval` s while it fails with one of
    `errors`, for `timeout` s; then the last error is raised again."""
    return lambda timeout, errors: within(timeout, interval, retry_on=errors)


control_ready = _answering(0.2)  # a starting gateway's control channel
kube_control_ready = _answering(KUBE_CONTROL_INTERVAL_S)  # a gateway pod's, through `kubectl exec`
port_back = _answering(PORT_BACK_INTERVAL_S)  # a recreated gateway's

# The policies that only fix `until`'s, `within`'s, `watch`'s or `renewal`'s interval (each
# gives what that one gives: the last error raised again, or the last `Pending`'s result).
readiness = until  # a started variant, every `interval` s until `deadline` (monotonic)
removal = partial(within, interval=0.1)  # a container Docker is removing, for `timeout` s
gpu_release = partial(within, interval=GPU_RELEASE_INTERVAL_S)  # a stopped container's GPU memory
following = partial(until, None)  # forever (a log follower: the caller returns or raises)
follower_attach = partial(within, interval=0.5)  # whether `up --with follow`'s follower reported
service_readiness = partial(until, interval=SERVICE_READINESS_INTERVAL_S)  # through the Kubernetes Service
settle_ready = partial(watch, interval=0.2)  # a variant behind a gateway that just started (once at 0 s)
single_drain = partial(watch, interval=0.5)  # what still runs on the one container a live set replaces
port_answers = partial(watch, interval=PORT_BACK_INTERVAL_S)  # a recreated gateway's published port
port_watch = partial(renewal, errors=())  # the published port while the gateway is replaced, until `stopped`
reopen = partial(until, None, 0)  # at once and without limit (a file replaced meanwhile)
