"""Sleeps and wakes through the control channel are counted, and a wake shows as `waking`."""

from __future__ import annotations

import threading

import httpx

from composer.gateway.host.client import GatewayControl

from .fakes import LocalExec


def _counter(metrics: str, name: str, result: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(f'{name}{{result="{result}"}} '):
            return float(line.split()[-1])
    raise AssertionError(f"{name}{{result={result}}} missing from /gateway/metrics")


def test_sleeps_and_wakes_are_counted_and_a_wake_in_progress_is_waking(gateway, backend) -> None:
    ctl = GatewayControl(LocalExec(gateway.config.control_socket))
    assert ctl.state().raw["waking"] is False
    assert ctl.sleep(level=1).status == 200
    backend.state.sleep_status = 500
    assert ctl.sleep(level=1).status == 500
    backend.state.wake_release = threading.Event()  # the wake lasts until the state was read
    woke: list[int] = []
    waker = threading.Thread(target=lambda: woke.append(ctl.wake_up().status))
    waker.start()
    try:
        gateway.wait(lambda g: g.metrics.waking._value.get() == 1)
        seen_waking = ctl.state().raw["waking"] is True
    finally:
        backend.state.wake_release.set()
    waker.join(30)
    assert seen_waking, "the control state did not say waking during a wake"
    assert woke == [200]
    assert ctl.state().raw["waking"] is False
    metrics = httpx.get(gateway.url + "/gateway/metrics", timeout=5).text
    assert _counter(metrics, "gateway_sleeps_total", "ok") == 1
    assert _counter(metrics, "gateway_sleeps_total", "failed") == 1
    assert _counter(metrics, "gateway_wakes_total", "ok") == 1
    assert _counter(metrics, "gateway_wakes_total", "failed") == 0
    assert "gateway_waking 0.0" in metrics
    ctl.is_sleeping()  # a GET is never counted
    metrics = httpx.get(gateway.url + "/gateway/metrics", timeout=5).text
    assert _counter(metrics, "gateway_wakes_total", "ok") == 1
