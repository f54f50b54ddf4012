"""The gateway image with the real daemon and the simulator: stream, hold across a swap, control by exec."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from composer.gateway import GatewayControl

from .dockerlab import (
    GATEWAY_IMAGE,
    KEY,
    SIM_IMAGE,
    Lab,
    Load,
    build_gateway_image,
    dumps,
    stream_once,
    summary,
)

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def image(docker_client) -> str:
    try:
        docker_client.images.get(SIM_IMAGE)
    except Exception:
        pytest.fail(f"{SIM_IMAGE} is missing: run `make image-sim` (make test does)")
    build_gateway_image()
    return GATEWAY_IMAGE


@pytest.fixture
def lab(docker_client, image) -> Iterator[Lab]:
    lab = Lab(docker_client).start()
    try:
        yield lab
    finally:
        lab.cleanup()


def wait_ready(ctl: GatewayControl, timeout: float = 20) -> None:
    assert ctl.wait_ready(timeout), ctl.state().raw


def test_image_runs_as_non_root_with_only_the_gateway_package(docker_client, image) -> None:
    img = docker_client.images.get(image)
    assert img.attrs["Config"]["User"] == "gateway"
    assert img.labels.get("vllm-composer.gateway.inputs")
    out = docker_client.containers.run(
        image,
        entrypoint=["python3", "-c"],
        command=["import os, composer; print(sorted(os.listdir(os.path.dirname(composer.__file__))))"],
        remove=True,
        network_mode="none",
    )
    assert out.decode().strip() == "['__init__.py', '__pycache__', 'errors.py', 'gateway']"
    second = build_gateway_image()
    assert "is current" in second


def test_streams_and_stays_small(lab: Lab) -> None:
    # how fast it starts is measured by benchmarks/bench_gateway_docker.py (startup_s)
    lab.wait_gateway()
    lab.start_sim("a")
    ctl = GatewayControl(lab.gateway)
    wait_ready(ctl)
    with httpx.Client() as client:
        outcomes = [stream_once(client, lab.url) for _ in range(20)]
    assert all(o.status == 200 and o.done for o in outcomes), summary(outcomes)
    rss_kib = int(
        next(
            line.split()[1]
            for line in lab.gateway.exec_run(["cat", "/proc/1/status"]).output.decode().splitlines()
            if line.startswith("VmRSS")
        )
    )
    print(f"gateway RSS {rss_kib / 1024:.1f} MiB")
    assert rss_kib < 100 * 1024


def test_control_by_exec_and_not_on_the_published_port(lab: Lab) -> None:
    lab.start_sim("a")
    lab.wait_gateway()
    ctl = GatewayControl(lab.gateway)
    wait_ready(ctl)
    state = ctl.state()
    assert state.upstream == "http://vllm:8000" and state.backend_ready and state.open
    # the published port forwards to the backend: control routes are not there
    for path in ("/state", "/hold", "/release", "/drain", "/route", "/backend"):
        r = httpx.post(lab.url + path, json={"lease_s": 60}, timeout=5)
        assert r.status_code == 404, (path, r.status_code, r.text)
    assert ctl.state().holds == () and ctl.state().open
    # dev routes are blocked publicly, even with the key
    r = httpx.post(lab.url + "/sleep?level=1", headers={"Authorization": f"Bearer {KEY}"}, timeout=5)
    assert r.status_code == 404
    # the port is published on 127.0.0.1 only
    bindings = lab.gateway.attrs["HostConfig"]["PortBindings"]["8000/tcp"]
    assert [b["HostIp"] for b in bindings] == ["127.0.0.1"]
    # the socket is the gateway user's alone
    listing = lab.gateway.exec_run(["ls", "-ln", "/run/gateway/control.sock"]).output.decode()
    assert listing.startswith("srw------- 1 10001 10001 "), listing
    hold = ctl.hold(30, owner="test")
    assert [h.id for h in ctl.state().holds] == [hold.id]
    assert ctl.release(hold.id) == [hold.id]
    metrics = httpx.get(lab.url + "/gateway/metrics", timeout=5).text
    assert "gateway_backend_ready 1.0" in metrics
    assert 'gateway_backend_info{upstream="http://vllm:8000"} 1.0' in metrics


def test_swap_by_hand_with_a_drain_cuts_and_refuses_nothing(lab: Lab) -> None:
    """8 clients stream while the simulator is replaced: drain (exec), stop, start another, release."""
    old = lab.start_sim("a")
    ctl = GatewayControl(lab.gateway)
    lab.wait_gateway()
    wait_ready(ctl)
    load = Load(lab.url, clients=8).start()
    time.sleep(1.5)
    began = time.monotonic()
    report = ctl.drain(timeout_s=30, lease_s=60, owner="test-swap")
    old.stop(timeout=5)
    lab.start_sim("b")
    wait_ready(ctl, 30)
    ctl.release(report.hold_id)
    swap_s = time.monotonic() - began
    time.sleep(1.5)
    result = summary(load.stop())
    print(
        f"drained {report.drained} cut {report.cut} in {report.duration_s}s; swap {swap_s:.2f}s; {dumps(result)}"
    )
    assert report.cut == 0 and report.drained >= 1
    assert result["refused"] == 0 and result["no_answer"] == 0 and result["cut"] == 0, result
    assert result["ok"] == result["requests"] > 50
    assert result["longest_ttfb_s"] <= swap_s + 1.0


def test_swap_by_hand_without_control_is_held_not_refused(lab: Lab) -> None:
    """Stop one simulator and start another under the same alias, nothing else: new requests wait."""
    old = lab.start_sim("a")
    ctl = GatewayControl(lab.gateway)
    lab.wait_gateway()
    wait_ready(ctl)
    load = Load(lab.url, clients=8).start()
    time.sleep(1.5)
    old.stop(timeout=5)  # the simulator exits at once and breaks the streams it was serving
    stopped_at = time.monotonic()
    lab.start_sim("b")
    wait_ready(ctl, 30)
    time.sleep(1.5)
    outcomes = load.stop()
    result = summary(outcomes)
    after_stop = [o for o in outcomes if o.started_at > stopped_at + 0.05]
    print(f"by hand: {dumps(result)}; requests started after the stop: {len(after_stop)}")
    assert result["refused"] == 0 and result["no_answer"] == 0, result
    assert result["cut"] <= 8, "only streams in flight when the backend died can break"
    assert len(after_stop) >= 8 and all(o.status == 200 and o.done for o in after_stop)
    state = ctl.state().raw
    assert set(state["refused"].values()) == {0}, state["refused"]
