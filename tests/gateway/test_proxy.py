"""The gateway between a client and a fake backend: real servers over real HTTP on 127.0.0.1."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import logging
import os
import threading
import time

import httpx
import pytest

from composer.gateway import GatewayControl
from composer.gateway.wire import PROBE_HEADER

from .conftest import KEY
from .fakes import DroppingBackend, FakeBackend, LocalExec, sse_request

AUTH = {"Authorization": f"Bearer {KEY}"}
CHAT = "/v1/chat/completions"


def metric(gw, name: str) -> float:
    text = httpx.get(gw.url + "/gateway/metrics").text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in metrics")


def post_in_thread(url: str, tag: str, results: dict, **extra) -> threading.Thread:
    def run() -> None:
        try:
            r = httpx.post(url + CHAT, content=sse_request(tag, **extra), headers=AUTH, timeout=30)
            results[tag] = (r.status_code, r.text, dict(r.headers))
        except httpx.HTTPError as err:
            results[tag] = (0, repr(err), {})

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_sse_chunks_arrive_before_the_stream_ends(gateway, backend) -> None:
    body = sse_request("s", chunks=3, wait_release=True)
    with httpx.stream("POST", gateway.url + CHAT, content=body, headers=AUTH, timeout=10) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        it = r.iter_raw()
        first = next(it)
        # the backend is still blocked after its first chunk: the gateway did not buffer
        assert b'"i": 0' in first and b"[DONE]" not in first
        assert "s" not in backend.state.finished
        backend.state.release.set()
        rest = b"".join(it)
    assert rest.endswith(b"data: [DONE]\n\n")
    assert backend.state.finished == ["s"]


@pytest.mark.parametrize("size", [1000, 300 * 1024, 24 * 1024 * 1024])
def test_request_bodies_of_any_size_pass_intact(gateway, size: int) -> None:
    payload = os.urandom(size)

    def chunks():
        for i in range(0, size, 65536):
            yield payload[i : i + 65536]

    r = httpx.post(gateway.url + "/v1/echo", content=chunks(), headers=AUTH, timeout=60)
    assert r.status_code == 200
    assert r.json()["size"] == size
    assert r.json()["sha256"] == hashlib.sha256(payload).hexdigest()


def test_headers_query_and_encoded_bodies_pass_as_they_came(gateway) -> None:
    # http.client sends only what it is told (no user agent, no content type): the gateway
    # must add none of its own, drop only hop-by-hop headers, and leave gzip bodies alone.
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    conn.putrequest("GET", "/v1/seen?a=1&b=%20x&a=2", skip_accept_encoding=True)
    for name, value in (
        ("Authorization", AUTH["Authorization"]),
        ("X-Trace", "t1"),
        ("X-Trace", "t2"),
        ("Connection", "keep-alive, X-Hop"),
        ("X-Hop", "drop me"),
    ):
        conn.putheader(name, value)
    conn.endheaders()
    response = conn.getresponse()
    raw = response.read()
    conn.close()
    assert response.status == 200
    assert response.getheader("content-encoding") == "gzip" and response.getheader("x-backend") == "seen"
    report = json.loads(gzip.decompress(raw))
    assert report["query"] == "a=1&b=%20x&a=2"
    names = [name for name, _ in report["headers"]]
    assert [v for k, v in report["headers"] if k == "x-trace"] == ["t1", "t2"]
    assert "x-hop" not in names
    assert not {"user-agent", "accept", "accept-encoding", "content-type"} & set(names), names


def test_sequential_requests_reuse_one_upstream_connection(gateway) -> None:
    ports = set()
    for _ in range(5):
        r = httpx.get(gateway.url + "/v1/seen", headers=AUTH, timeout=10)  # a new client connection each
        assert r.status_code == 200
        ports.add(r.json()["peer_port"])  # httpx decodes the gzip body
    assert len(ports) == 1, ports


def test_wrong_key_is_refused_at_once_without_taking_a_queue_slot(make_gateway, backend) -> None:
    gw = make_gateway(max_held=1, hold_timeout=30)
    ctl = GatewayControl(LocalExec(gw.config.control_socket))
    hold = ctl.hold(30)
    results: dict = {}
    t = post_in_thread(gw.url, "ok", results)
    gw.wait(lambda g: g.gate.held == 1)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        # answered while the hold (30 s) stands: a held request would time this client out, and
        # a queued one would get 429 (max_held=1 is taken), so a 401 is the key check, first
        r = httpx.post(gw.url + CHAT, content=sse_request("bad"), headers=headers, timeout=5)
        assert r.status_code == 401
        assert r.json()["error"]["message"].startswith("Unauthorized")
    assert gw.gateway.gate.held == 1  # the queue (max_held=1) still has only the good request
    assert metric(gw, 'gateway_refused_requests_total{reason="unauthorized"}') == 3
    ctl.release(hold.id)
    t.join(10)
    assert results["ok"][0] == 200
    assert "bad" not in backend.state.arrivals
    # unguarded paths need no key, like vLLM
    assert httpx.get(gw.url + "/version", timeout=5).text == "backend /version"


def test_held_requests_flow_in_arrival_order(make_gateway, backend) -> None:
    gw = make_gateway()
    ctl = GatewayControl(LocalExec(gw.config.control_socket))
    hold = ctl.hold(30, owner="test")
    results: dict = {}
    threads = []
    tags = [f"r{i}" for i in range(10)]
    for i, tag in enumerate(tags):
        threads.append(post_in_thread(gw.url, tag, results))
        gw.wait(lambda g, n=i + 1: g.gate.held == n)
    assert backend.state.arrivals == []
    assert ctl.state().held == 10 and not ctl.state().open
    ctl.release(hold.id)
    for t in threads:
        t.join(15)
    # The gate releases them strictly in order (test_gate.py); over separate upstream
    # connections the backend may see two neighbours swapped, but never a shuffle.
    arrived = backend.state.arrivals
    assert sorted(arrived) == sorted(tags)
    pairs = [(a, b) for i, a in enumerate(tags) for b in tags[i + 1 :]]
    in_order = sum(arrived.index(a) < arrived.index(b) for a, b in pairs)
    assert in_order >= 0.9 * len(pairs), arrived
    assert all(results[t][0] == 200 and results[t][1].endswith("data: [DONE]\n\n") for t in tags)
    assert metric(gw, "gateway_hold_seconds_count") == 10


def test_hold_timeout_answers_503_with_retry_after(make_gateway, backend) -> None:
    backend.state.ready = False
    gw = make_gateway(ready=False, hold_timeout=0.5, retry_after=7)
    started = time.monotonic()
    r = httpx.post(gw.url + CHAT, content=sse_request("t"), headers=AUTH, timeout=10)
    waited = time.monotonic() - started
    # held for hold_timeout (never less), then refused well before the client's own timeout
    assert r.status_code == 503
    assert r.headers["retry-after"] == "7"
    assert waited >= 0.5
    assert metric(gw, 'gateway_refused_requests_total{reason="hold_timeout"}') == 1
    assert backend.state.arrivals == []


def test_full_queue_answers_429_with_retry_after(make_gateway, backend) -> None:
    backend.state.ready = False
    gw = make_gateway(ready=False, max_held=2, hold_timeout=30)
    results: dict = {}
    threads = [post_in_thread(gw.url, f"q{i}", results) for i in range(2)]
    gw.wait(lambda g: g.gate.held == 2)
    r = httpx.post(gw.url + CHAT, content=sse_request("over"), headers=AUTH, timeout=5)
    assert r.status_code == 429
    assert r.headers["retry-after"] == "2"
    assert metric(gw, 'gateway_refused_requests_total{reason="queue_full"}') == 1
    backend.state.ready = True  # the poller notices and the two held requests flow
    for t in threads:
        t.join(10)
    assert sorted(results) == ["q0", "q1"] and all(v[0] == 200 for v in results.values())


def test_drain_waits_for_in_flight_and_counts_cuts(gateway, backend) -> None:
    ctl = GatewayControl(LocalExec(gateway.config.control_socket))
    results: dict = {}
    # the streams wait at the backend until the drain has begun (its hold closes the gate)
    finishing = [post_in_thread(gateway.url, f"f{i}", results, chunks=3, wait_release=True) for i in range(3)]
    gateway.wait(lambda g: g.gate.inflight == 3)
    releaser = threading.Thread(
        target=lambda: (gateway.wait(lambda g: not g.gate.is_open), backend.state.release.set()), daemon=True
    )
    releaser.start()
    report = ctl.drain(timeout_s=60, lease_s=30)
    releaser.join(30)
    assert (report.drained, report.cut) == (3, 0)
    # the drain returned only once the three streams had ended: their clients are done too
    for t in finishing:
        t.join(15)
    assert all(results[f"f{i}"][0] == 200 for i in range(3))
    assert report.duration_s > 0
    # the drain's hold stays until released: a new request waits
    late = post_in_thread(gateway.url, "late", results)
    gateway.wait(lambda g: g.gate.held == 1)
    ctl.release(report.hold_id)
    late.join(10)
    assert results["late"][0] == 200

    # a drain that times out cuts what is still streaming: each stream ends with an error event
    # in OpenAI's shape and [DONE], so its client sees why it ended
    backend.state.release.clear()  # these streams wait at the backend until the drain cut them
    slow = [post_in_thread(gateway.url, f"s{i}", results, chunks=200, wait_release=True) for i in range(2)]
    gateway.wait(lambda g: g.gate.inflight == 2)
    report = ctl.drain(timeout_s=0.5, lease_s=30)
    assert (report.drained, report.cut) == (0, 2)
    for t in slow:
        t.join(10)
    for i in range(2):
        status, text, _ = results[f"s{i}"]
        events = [e for e in text.split("\n\n") if e]
        assert status == 200 and events[-1] == "data: [DONE]", text[-300:]
        error = json.loads(events[-2].removeprefix("data: "))["error"]
        assert error["code"] == 503 and "drain timeout" in error["message"]
        assert '"i": 1,' not in text and '"i": 0,' in text  # cut before the backend's end
    assert ctl.state().inflight == 0
    assert metric(gateway, "gateway_cut_requests_total") == 2
    assert metric(gateway, "gateway_drained_requests_total") == 3
    ctl.release()


def test_a_stalled_stream_ends_with_an_error_event_and_marks_the_backend_down(
    make_gateway, backend, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    gw = make_gateway(stall_timeout=0.3)
    results: dict = {}
    post_in_thread(gw.url, "stall", results, chunks=2, interval=5).join(15)
    status, text, _ = results["stall"]
    events = [e for e in text.split("\n\n") if e]
    assert status == 200 and events[0].startswith('data: {"i": 0') and events[-1] == "data: [DONE]", text
    error = json.loads(events[-2].removeprefix("data: "))["error"]
    assert error["code"] == 504 and "stall_timeout" in error["message"]
    assert '"i": 1' not in text
    assert metric(gw, "gateway_stalled_streams_total") == 1
    assert "backend unreachable (a stream stalled for 0.3s)" in caplog.text  # held until ready again
    post_in_thread(gw.url, "after", results, chunks=2).join(10)  # the poller finds it ready again
    assert results["after"][0] == 200 and results["after"][1].endswith("data: [DONE]\n\n")


def test_dev_routes_are_not_reachable_publicly_only_through_control(gateway, backend) -> None:
    for method, path in [
        ("POST", "/sleep?level=1"),
        ("POST", "//sleep/"),
        ("POST", "/wake_up"),
        ("GET", "/is_sleeping"),
        ("POST", "/collective_rpc"),
        ("POST", "/reset_prefix_cache"),
        ("POST", "/v1/load_lora_adapter"),
    ]:
        r = httpx.request(method, gateway.url + path, headers=AUTH, timeout=5)
        assert r.status_code == (400 if path.startswith("//") else 404), path
    assert backend.state.paths == []
    ctl = GatewayControl(LocalExec(gateway.config.control_socket))
    assert ctl.sleep(level=1).status == 200
    assert ctl.is_sleeping() is True
    assert ctl.wake_up(tags=["weights"]).status == 200
    assert ctl.is_sleeping() is False
    assert backend.state.paths == ["/sleep?level=1", "/is_sleeping", "/wake_up?tags=weights", "/is_sleeping"]


def test_control_is_not_served_on_the_public_port(gateway, backend) -> None:
    for path in ("/state", "/hold", "/release", "/drain", "/route"):
        r = httpx.post(gateway.url + path, json={}, timeout=5)
        assert (
            "holds" not in r.text and "hold" not in r.json()
            if r.headers.get("content-type") == "application/json"
            else True
        )
        assert r.status_code in (404, 405)  # the backend's own answer
    assert gateway.gateway.gate.is_open
    mode = os.stat(gateway.config.control_socket).st_mode & 0o777
    assert mode == 0o600


def test_client_disconnect_cancels_the_upstream_request(gateway, backend) -> None:
    body = sse_request("gone", chunks=1000, interval=0.01)
    with httpx.stream("POST", gateway.url + CHAT, content=body, headers=AUTH, timeout=10) as r:
        next(r.iter_raw())
    gateway.wait(lambda _: "gone" in backend.state.cancelled)
    assert backend.state.cancelled == ["gone"]
    gateway.wait(lambda g: g.gate.inflight == 0)


def test_client_disconnect_while_held_leaves_the_queue(make_gateway, backend) -> None:
    gw = make_gateway()
    ctl = GatewayControl(LocalExec(gw.config.control_socket))
    ctl.hold(30)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(gw.url + CHAT, content=sse_request("impatient"), headers=AUTH, timeout=0.5)
    gw.wait(lambda g: g.gate.held == 0)
    ctl.release()
    time.sleep(0.2)
    assert backend.state.arrivals == []


def test_lease_expiry_releases_held_requests(make_gateway, backend) -> None:
    gw = make_gateway()
    ctl = GatewayControl(LocalExec(gw.config.control_socket))
    hold = ctl.hold(lease_s=30)
    results: dict = {}
    t = post_in_thread(gw.url, "waits", results)
    gw.wait(lambda g: g.gate.held == 1)
    # the controller renews once more with a short lease, then "crashes": no renewal, no release
    renewed = time.monotonic()
    ctl.renew(hold.id, lease_s=1)
    t.join(30)
    assert results["waits"][0] == 200
    assert time.monotonic() - renewed >= 1.0  # not before the lease ran out
    assert backend.state.arrivals == ["waits"] and ctl.state().holds == ()


def test_backend_replaced_by_hand_is_held_not_refused(make_gateway, backend) -> None:
    gw = make_gateway(hold_timeout=20)
    port = backend.port
    backend.stop()  # the variant goes away; nothing is listening on its port
    results: dict = {}
    threads = [post_in_thread(gw.url, f"h{i}", results) for i in range(5)]
    gw.wait(lambda g: g.gate.held == 5)
    assert not gw.gateway.upstream.ready and results == {}
    replacement = FakeBackend(port=port).start()  # another variant, same address
    replacement.state.api_key = KEY
    try:
        for t in threads:
            t.join(10)
        assert {k: v[0] for k, v in results.items()} == {f"h{i}": 200 for i in range(5)}
        assert sorted(replacement.state.arrivals) == [f"h{i}" for i in range(5)]
    finally:
        replacement.stop()


def test_route_moves_new_requests_to_another_backend(gateway, backend) -> None:
    other = FakeBackend().start()
    other.state.api_key = KEY
    try:
        ctl = GatewayControl(LocalExec(gateway.config.control_socket))
        assert ctl.route(other.url) == backend.url
        assert ctl.wait_ready(5)
        r = httpx.post(gateway.url + CHAT, content=sse_request("moved"), headers=AUTH, timeout=5)
        assert r.status_code == 200
        assert other.state.arrivals == ["moved"] and backend.state.arrivals == []
        assert metric(gateway, "gateway_routes_total") == 1
        assert (
            f'gateway_backend_info{{upstream="{other.url}"}} 1.0'
            in httpx.get(gateway.url + "/gateway/metrics").text
        )
    finally:
        other.stop()


def test_served_name_must_be_listed_for_ready(make_gateway, backend) -> None:
    gw = make_gateway(ready=False, served_name="another-model")
    gw.wait(lambda g: "another-model" in (g.upstream.last_error or ""))
    assert not gw.gateway.upstream.ready
    ok = make_gateway(ready=False, served_name="test-model")
    ok.wait(lambda g: g.upstream.ready)


def test_control_errors_are_reported(gateway) -> None:
    from composer.gateway import GatewayControlError

    ctl = GatewayControl(LocalExec(gateway.config.control_socket))
    with pytest.raises(GatewayControlError, match="unknown id"):
        ctl.release("nope")
    with pytest.raises(GatewayControlError, match="upstream"):
        ctl.route("not a url")
    with pytest.raises(GatewayControlError, match="lease_s"):
        ctl.hold(-1)


def test_probe_token_passes_its_own_hold_only(gateway, backend) -> None:
    """The swap's gate reaches the new backend through a drain's hold; clients stay held."""
    ctl = GatewayControl(LocalExec(gateway.config.control_socket))
    token = "-p" + "p" * 38  # may start with "-", like secrets.token_urlsafe
    report = ctl.drain(timeout_s=5, lease_s=30, probe_token=token)
    results: dict = {}
    client = post_in_thread(gateway.url, "client", results)
    gateway.wait(lambda g: g.gate.held == 1)
    probe = {**AUTH, PROBE_HEADER: token}
    passed = httpx.post(gateway.url + CHAT, content=sse_request("probe"), headers=probe, timeout=10)
    assert passed.status_code == 200 and "probe" in backend.state.arrivals
    assert "client" not in backend.state.arrivals and gateway.gateway.gate.held == 1
    wrong = httpx.get(gateway.url + "/health", headers={PROBE_HEADER: "q" * 40}, timeout=5)
    assert wrong.status_code == 403
    unauthorized = httpx.post(
        gateway.url + CHAT, content=sse_request("nokey"), headers={PROBE_HEADER: token}, timeout=5
    )
    assert unauthorized.status_code == 401  # the key check comes first, token or not
    ctl.release(report.hold_id)
    client.join(10)
    assert results["client"][0] == 200
    after = httpx.get(gateway.url + "/health", headers={PROBE_HEADER: token}, timeout=5)
    assert after.status_code == 403  # the token died with its hold


def test_probe_to_a_down_backend_fails_fast_instead_of_queueing(make_gateway, backend) -> None:
    backend.state.ready = False
    gw = make_gateway(ready=False, hold_timeout=30)
    ctl = GatewayControl(LocalExec(gw.config.control_socket))
    token = "-t" + "t" * 38
    hold = ctl.hold(lease_s=30, probe_token=token)
    ctl.route("http://127.0.0.1:9")  # nothing listens there
    r = httpx.get(gw.url + "/health", headers={PROBE_HEADER: token}, timeout=10)
    # a queued probe would wait for hold_timeout (30 s) and time this client out (10 s)
    assert r.status_code == 502 and gw.gateway.gate.held == 0
    ctl.release(hold.id)


def test_a_request_whose_connection_breaks_reaches_the_backend_at_most_twice(make_gateway) -> None:
    dropping = DroppingBackend().start()
    try:
        gw = make_gateway(upstream_override=dropping.url, hold_timeout=30)
        # on a fresh connection (it may have been read: not sent again), then on a kept-alive
        # one (a closed idle connection is sent again once)
        for tag, reused in (("fresh", False), ("reused", True)):
            if reused:
                # with the key: held until the poller has seen the backend up again (the break
                # above marked it down), then pools one kept-alive connection
                assert httpx.get(gw.url + "/version", headers=AUTH, timeout=30).status_code == 200
            r = httpx.post(gw.url + CHAT, content=sse_request(tag), headers=AUTH, timeout=60)
            assert r.status_code == 502
            error = r.json()["error"]
            assert error["code"] == 502 and error["type"] == "BadGatewayError"
            assert "closed the connection before answering" in error["message"]
        # (the gateway rewrites a stream's body: it asks for token ids, `continuation`)
        seen = {
            tag: sum(f'"tag":"{tag}"' in a.replace('": "', '":"') for a in dropping.arrivals)
            for tag in ("fresh", "reused")
        }
        assert seen == {"fresh": 1, "reused": 2}, dropping.arrivals
    finally:
        dropping.stop()


def test_a_frozen_backend_is_answered_504_at_the_unresponsive_timeout(make_gateway, backend) -> None:
    gw = make_gateway(unresponsive_timeout=1.0)
    backend.state.frozen = True  # accepts connections, answers nothing (docker pause)
    try:
        body = sse_request("frozen", stream=False)
        r = httpx.post(gw.url + CHAT, content=body, headers=AUTH, timeout=60)
        assert r.status_code == 504
        error = r.json()["error"]
        assert error["code"] == 504 and "unresponsive_timeout" in error["message"]
        assert not gw.gateway.upstream.ready  # new requests wait for the poller
    finally:
        backend.state.frozen = False
    assert (
        httpx.post(gw.url + CHAT, content=sse_request("after"), headers=AUTH, timeout=30).status_code == 200
    )


def test_a_slow_answer_from_a_backend_that_answers_health_is_not_cut(make_gateway, backend) -> None:
    gw = make_gateway(unresponsive_timeout=0.5)
    # a non-streamed generation: its head comes at its end, six probe intervals later
    body = sse_request("slow", stream=False, interval=1.0)
    r = httpx.post(gw.url + CHAT, content=body, headers=AUTH, timeout=60)
    assert r.status_code == 200 and r.json() == {"tag": "slow"}
