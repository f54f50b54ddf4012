"""The control channel's tether and drain progress against a real gateway (in-process) and
a fake backend: `ctl tether` releases its owner's holds when its stdin closes, and a drain
reports what still runs while it waits."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import httpx

from composer.gateway import GatewayControl
from composer.gateway.host.client import DrainProgress
from tests.conftest import REPO

from .conftest import KEY
from .fakes import LocalExec, sse_request

AUTH = {"Authorization": f"Bearer {KEY}"}


def test_closing_the_tether_releases_its_owners_holds_only(gateway) -> None:
    socket = gateway.config.control_socket
    ctl = GatewayControl(LocalExec(socket))
    mine = ctl.hold(60, owner="compose-spec up (pid 1, a)")
    theirs = ctl.hold(60, owner="someone else")
    env = {**os.environ, "PYTHONPATH": str(REPO), "GATEWAY_CONTROL_SOCKET": socket}
    tether = subprocess.Popen(
        [sys.executable, "-m", "composer.gateway.ctl", "tether", "--owner=compose-spec up (pid 1, a)"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert {h.id for h in ctl.state().holds} == {mine.id, theirs.id}  # open: nothing released
        assert tether.stdin is not None
        tether.stdin.close()  # what Docker does to the exec's stdin when `up` dies
        tether.wait(timeout=30)
        assert tether.stdout is not None
        out = tether.stdout.read()
    finally:
        if tether.poll() is None:
            tether.kill()
    assert tether.returncode == 0 and mine.id in out.decode()
    assert [h.id for h in ctl.state().holds] == [theirs.id]
    ctl.release(theirs.id)


def test_a_drain_reports_what_is_in_flight_while_it_waits(gateway, backend) -> None:
    ctl = GatewayControl(LocalExec(gateway.config.control_socket))
    body = sse_request("slow", wait_release=True)  # streams once the drain has reported it
    stream = threading.Thread(
        target=lambda: httpx.post(
            gateway.url + "/v1/chat/completions", content=body, headers=AUTH, timeout=30
        ),
        daemon=True,
    )
    stream.start()
    gateway.wait(lambda g: g.gate.inflight == 1)
    seen: list[DrainProgress] = []

    def progress(report: DrainProgress) -> None:
        seen.append(report)
        backend.state.release.set()  # the stream may end now: the drain saw it in flight

    report = ctl.drain(timeout_s=60, lease_s=90, progress=progress)
    assert (report.drained, report.cut) == (1, 0)
    assert seen and seen[0].inflight == 1 and seen[0].timeout_s == 60
    assert [p.elapsed_s for p in seen] == sorted(p.elapsed_s for p in seen)
    assert seen[0].describe().startswith("draining (1 in flight, ")
    ctl.release(report.hold_id)
    stream.join(10)


def test_a_switch_killed_while_nothing_serves_answers_held_and_new_requests_503_at_once(
    backend, make_gateway
) -> None:
    """`up` killed (its tether closes) after it stopped the old variant and before anything
    else serves: the held request and new ones get 503 naming `compose-spec up` at once,
    not after hold_timeout."""
    gateway = make_gateway(hold_timeout=600)
    socket = gateway.config.control_socket
    ctl = GatewayControl(LocalExec(socket))
    owner = "compose-spec up (pid 1, a)"
    ctl.hold(60, owner=owner)
    answers: list[httpx.Response] = []
    body = sse_request("held")
    held = threading.Thread(
        target=lambda: answers.append(
            httpx.post(gateway.url + "/v1/chat/completions", content=body, headers=AUTH, timeout=60)
        ),
        daemon=True,
    )
    held.start()
    gateway.wait(lambda g: g.gate.held == 1)
    backend.stop()  # the old variant is gone; nothing starts
    env = {**os.environ, "PYTHONPATH": str(REPO), "GATEWAY_CONTROL_SOCKET": socket}
    tether = subprocess.run(
        [sys.executable, "-m", "composer.gateway.ctl", "tether", f"--owner={owner}"],
        input=b"",
        capture_output=True,
        env=env,
        timeout=30,
    )
    assert tether.returncode == 0
    held.join(timeout=30)
    assert not held.is_alive()
    (answer,) = answers
    new = httpx.post(gateway.url + "/v1/chat/completions", content=body, headers=AUTH, timeout=30)
    for reply in (answer, new):
        assert reply.status_code == 503 and "`compose-spec up`" in reply.text, reply.text
    assert gateway.gateway.gate.abandoned
