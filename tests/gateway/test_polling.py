"""The readiness poller: fast while the backend is not ready or requests are held, quiet
while it is ready (each probe is a line in vLLM's access log)."""

from __future__ import annotations

import time

import pytest

from composer.gateway.host.client import GatewayControl
from composer.gateway.routing.upstream import READY_POLL_INTERVAL

from .fakes import LocalExec

# Each test counts probes per second of real time: they run alone (`timing`), where a busy
# worker beside them cannot starve the poller.
pytestmark = pytest.mark.timing


def probes_during(backend, seconds: float) -> int:
    before = backend.state.health_checks
    time.sleep(seconds)
    return backend.state.health_checks - before


def test_ready_and_idle_probes_rarely(gateway, backend) -> None:
    assert READY_POLL_INTERVAL >= 1.0
    assert probes_during(backend, 1.0) <= 1  # at the fast interval (0.02 s here): about 50


def test_not_ready_probes_fast_and_notices_readiness_within_an_interval(make_gateway, backend) -> None:
    backend.state.ready = False
    gw = make_gateway(ready=False, poll_interval=0.05)
    assert probes_during(backend, 0.5) >= 6
    backend.state.ready = True
    before = backend.state.health_checks
    gw.wait(lambda g: g.upstream.ready, timeout=2)
    assert backend.state.health_checks - before <= 2  # the probe in flight, then the next one


def test_a_hold_makes_it_probe_fast(gateway, backend) -> None:
    ctl = GatewayControl(LocalExec(gateway.config.control_socket))
    hold = ctl.hold(lease_s=30)
    try:
        time.sleep(0.1)
        assert probes_during(backend, 0.5) >= 10
    finally:
        ctl.release(hold.id)
    time.sleep(0.1)
    assert probes_during(backend, 0.5) <= 1


def test_a_backend_failing_while_idle_is_noticed_by_the_next_slow_probe(gateway, backend) -> None:
    gateway.gateway.upstream.ready_interval = 0.5  # from the next probe on
    time.sleep(READY_POLL_INTERVAL + 0.1)
    backend.state.ready = False
    before = backend.state.health_checks
    gateway.wait(lambda g: not g.upstream.ready, timeout=3)
    assert backend.state.health_checks - before <= 2  # the probe in flight, then the next one
