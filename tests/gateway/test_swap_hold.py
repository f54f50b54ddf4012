"""A swap's hold on the gateway outlives a drain longer than its lease, and a probe token the
gateway no longer knows fails the swap's gate at once instead of reading as "not ready"."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from composer.engine.gate import GateTarget, wait_ready
from composer.errors import HealthCheckFailed
from composer.gateway.host.client import GatewayControl
from composer.gateway.wire import PROBE_HEADER

from .conftest import KEY
from .fakes import SERVED, LocalExec, sse_request

AUTH = {"Authorization": f"Bearer {KEY}"}


class _Running:
    def exit_reason(self) -> str | None:
        return None

    def log(self, tail: int | None = None) -> str:
        return ""

    first_run_log = log


def test_a_drain_longer_than_the_lease_keeps_its_hold(make_gateway, backend, monkeypatch) -> None:
    gw = make_gateway()
    control = GatewayControl(LocalExec(gw.config.control_socket))
    gate, at_end = gw.gateway.gate, []
    drain = gate.drain

    async def drain_then_look(*args, **kwargs):
        result = await drain(*args, **kwargs)
        at_end.append(gate.snapshot())  # the drain's own loop step: no lease can lapse in between
        return result

    monkeypatch.setattr(gate, "drain", drain_then_look)
    streaming = threading.Thread(
        target=lambda: httpx.post(
            gw.url + "/v1/chat/completions",
            content=sse_request("slow", wait_release=True),
            headers=AUTH,
            timeout=30,
        ),
        daemon=True,
    )
    streaming.start()
    gw.wait(lambda g: g.gate.inflight == 1)
    report = control.drain(timeout_s=4, lease_s=2)  # the stream outlasts the drain and the lease
    assert report.cut == 1 and report.duration_s > 2  # longer than the lease
    # the hold is still set when the drain ends: its lease runs from there (on a busy machine it
    # may lapse before this test gets to look again, so it is looked at from the drain itself)
    (ended,) = at_end
    assert [(h["id"], h["lease_s"]) for h in ended["holds"]] == [(report.hold_id, 2)]


def test_a_probe_token_the_gateway_refuses_fails_the_gate_at_once(make_gateway, backend) -> None:
    gw = make_gateway()
    target = GateTarget("mtp", gw.port, "127.0.0.1", SERVED, KEY, headers=((PROBE_HEADER, "t" * 40),))
    with pytest.raises(HealthCheckFailed) as err:
        wait_ready(_Running(), target, time.monotonic() + 15, 0.05, lambda _: None)  # type: ignore[arg-type]
    assert "refused the swap's probe token" in str(err.value)  # not "not ready after 15s"
