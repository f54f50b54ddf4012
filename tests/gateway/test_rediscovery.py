"""A gateway that starts (restart, reboot, crash) finds the serving sleep-mode backend by
itself, and never counts a sleeping backend as ready (its /health is 200 while asleep)."""

from __future__ import annotations

import time

from composer.gateway.host.client import GatewayControl

from .conftest import KEY
from .fakes import FakeBackend, LocalExec


def test_a_started_gateway_forwards_to_the_candidate_that_is_healthy_and_awake(make_gateway, backend) -> None:
    asleep = FakeBackend().start()
    asleep.state.sleeping = True
    asleep.state.api_key = KEY
    try:
        dead = "http://127.0.0.1:9"  # the old shared service name: nothing answers there
        gw = make_gateway(ready=False, candidates=(asleep.url, backend.url), upstream_override=dead)
        gw.wait(lambda g: g.upstream.ready, timeout=5)
        assert gw.gateway.upstream.url == backend.url  # not the sleeper, not the dead default
    finally:
        asleep.stop()


def test_a_gateway_routed_to_a_sleeping_backend_holds_instead_of_forwarding(make_gateway, backend) -> None:
    gw = make_gateway(candidates=(backend.url,))
    ctl = GatewayControl(LocalExec(gw.config.control_socket))
    backend.state.sleeping = True
    ctl.route(backend.url)  # as `up` does before a wake; here it was killed before the wake
    time.sleep(0.3)
    assert not gw.gateway.upstream.ready
    assert "asleep" in ctl.state().raw["backend_error"]
    backend.state.sleeping = False
    gw.wait(lambda g: g.upstream.ready, timeout=3)
    # explicitly routed: no rediscovery moves it elsewhere afterwards
    assert gw.gateway.upstream.url == backend.url
