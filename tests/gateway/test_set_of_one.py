"""The single upstream is a live set of one: the same forwarding path as a live member (a
holder's probe, the outstanding count, readiness) and the same entry of the state's
`upstreams` (named `single`)."""

from __future__ import annotations

import threading

import httpx
import pytest

from composer.gateway import GatewayControl
from composer.gateway.config import LiveSpec
from composer.gateway.wire import PROBE_HEADER

from .conftest import KEY
from .fakes import FakeBackend, GatewayThread, InProcessExec, sse_request

AUTH = {"Authorization": f"Bearer {KEY}"}
CHAT = "/v1/chat/completions"
TOKEN = "p" * 40


def one_upstream(shape: str, url: str) -> GatewayThread:
    """A gateway forwarding to `url`: as its single upstream, or as a live set of one member."""
    if shape == "single":
        return GatewayThread(url, api_key=KEY, hold_timeout=30).start()
    live = (LiveSpec("m/1", "m", url),)
    return GatewayThread("http://127.0.0.1:9", api_key=KEY, hold_timeout=30, live_upstreams=live).start()


def member_outstanding(shape: str, state) -> int:
    """The member's requests in flight, as `/state` reports them for this shape."""
    (member,) = state.upstreams
    assert member.name == ("single" if shape == "single" else "m/1")
    return member.outstanding


@pytest.mark.parametrize("shape", ["single", "set of one"])
def test_a_probe_readiness_and_the_outstanding_count_take_one_path(backend, shape: str) -> None:
    """A holder's probe reaches the one member before its readiness probe passes (a swap's
    gate after `/route`), on the single upstream and on a live set of one alike; while it
    streams it counts on that member, and the member's readiness is the gateway's."""
    backend.state.ready = False  # /health answers 503: the poller never finds it ready
    gw = one_upstream(shape, backend.url)
    try:
        ctl = GatewayControl(InProcessExec(gw.config.control_socket))
        hold = ctl.hold(lease_s=30, probe_token=TOKEN)
        results: dict[str, httpx.Response] = {}

        def probe() -> None:
            body = sse_request("probe", wait_release=True)
            headers = {**AUTH, PROBE_HEADER: TOKEN}
            results["probe"] = httpx.post(gw.url + CHAT, content=body, headers=headers, timeout=30)

        sender = threading.Thread(target=probe)
        sender.start()
        gw.wait(lambda g: "probe" in backend.state.arrivals or not sender.is_alive())
        assert "probe" in backend.state.arrivals, results["probe"].text
        state = ctl.state()
        assert not state.backend_ready and member_outstanding(shape, state) == 1
        backend.state.release.set()
        sender.join(30)
        assert results["probe"].status_code == 200 and "probe" in backend.state.finished
        assert member_outstanding(shape, ctl.state()) == 0
        backend.state.ready = True
        gw.wait(lambda g: g.backend_ready)
        metrics = httpx.get(gw.url + "/gateway/metrics", timeout=10).text
        assert "gateway_backend_ready 1.0" in metrics
        assert ('gateway_live_ready{upstream="m/1"} 1.0' in metrics) == (shape == "set of one")
        ctl.release(hold.id)
    finally:
        gw.stop()


def test_a_live_set_replaces_the_set_of_one_and_an_empty_one_brings_it_back(backend) -> None:
    """A stream in flight on the single upstream finishes there (counted as
    the `single` entry of `upstreams`, leaving) while a published set serves new requests; `[]` routes to the
    single upstream again, readiness and all."""
    other = FakeBackend().start()
    other.state.api_key = KEY
    gw = one_upstream("single", backend.url)
    try:
        gw.wait(lambda g: g.backend_ready)
        ctl = GatewayControl(InProcessExec(gw.config.control_socket))
        results: dict[str, httpx.Response] = {}

        def send(tag: str, **extra) -> threading.Thread:
            def run() -> None:
                body = sse_request(tag, **extra)
                results[tag] = httpx.post(gw.url + CHAT, content=body, headers=AUTH, timeout=30)

            sender = threading.Thread(target=run)
            sender.start()
            return sender

        early = send("early", wait_release=True)
        gw.wait(lambda g: "early" in backend.state.arrivals)
        ctl.set_upstreams([{"name": "m/1", "variant": "m", "url": other.url}])
        send("live").join(30)
        assert results["live"].headers["x-served-by"] == "m/1" and "live" in other.state.arrivals
        state = ctl.state()
        assert [(u.name, u.outstanding, u.leaving) for u in state.upstreams] == [
            ("m/1", 0, False),
            ("single", 1, True),
        ]
        # the single member drains like any member left out of the set
        waiting = ctl.drain_upstream("single", 0.2)
        assert (waiting.done, waiting.outstanding) == (False, 1)
        threading.Timer(0.3, backend.state.release.set).start()
        drained = ctl.drain_upstream("single", 30)
        assert (drained.done, drained.outstanding) == (True, 0)
        early.join(30)
        assert results["early"].status_code == 200 and [u.name for u in ctl.state().upstreams] == ["m/1"]
        ctl.set_upstreams([])
        gw.wait(lambda g: g.backend_ready)
        send("back").join(30)
        assert results["back"].status_code == 200 and "back" in backend.state.arrivals
        # the set of one names itself too (its host while the serving variant is unknown)
        assert results["back"].headers["x-served-by"] == "127.0.0.1"
        assert [(u.name, u.url) for u in ctl.state().upstreams] == [("single", backend.url)]
    finally:
        gw.stop()
        other.stop()
