"""The gateway as clients meet it: the official `openai` SDK reads the gateway's own answers
(its typed errors with the reason), the model list shows the aliases, and a request that
needs a switch with no follower attached is answered at once."""

from __future__ import annotations

import json
import threading

import httpx
import openai
import pytest

from composer.gateway.host.client import GatewayControl
from composer.gateway.public import bodies
from composer.gateway.public.proxy import REPLAY_LIMIT

from .conftest import KEY
from .fakes import SERVED, LocalExec

AUTH = {"Authorization": f"Bearer {KEY}"}
MESSAGES = [{"role": "user", "content": "hi"}]


def sdk(gw) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0, timeout=10)


def switching_gateway(make_gateway, **settings):
    return make_gateway(
        served_name=SERVED, aliases=(("fast", "mtp"), ("plain", "baseline")), switch_on_model=True, **settings
    )


def test_sdk_reads_a_full_queue_as_rate_limit_error_with_the_reason(make_gateway, backend) -> None:
    backend.state.ready = False
    gw = make_gateway(ready=False, max_held=0, hold_timeout=30, retry_after=9)
    with pytest.raises(openai.RateLimitError) as err:
        sdk(gw).chat.completions.create(model=SERVED, messages=MESSAGES)
    assert "max_held=0" in str(err.value) and "queue" in str(err.value)
    assert err.value.response.headers["retry-after"] == "9"
    assert err.value.body["type"] == "RateLimitError" and err.value.body["code"] == 429


def test_sdk_reads_a_failed_switch_as_server_error_saying_what_failed(make_gateway, backend) -> None:
    gw = switching_gateway(make_gateway)
    control = GatewayControl(LocalExec(gw.config.control_socket))
    control.report_serving("baseline")  # the follower is attached
    control.next_demand(0)  # a follower polls
    raised: list[Exception] = []

    def ask() -> None:
        try:
            sdk(gw).chat.completions.create(model="fast", messages=MESSAGES, extra_body={"chunks": 1})
        except Exception as err:
            raised.append(err)

    asking = threading.Thread(target=ask)
    asking.start()
    demand = control.next_demand(5)
    assert demand is not None and demand.variant == "mtp"
    control.report_serving(
        "baseline", demand.id, ok=False, detail="mtp exited with code 1: CUDA error: out of memory"
    )
    asking.join(10)
    assert len(raised) == 1 and isinstance(raised[0], openai.InternalServerError), raised
    assert "the switch to mtp failed: mtp exited with code 1: CUDA error: out of memory" in str(raised[0])
    assert int(raised[0].response.headers["retry-after"]) >= 1


def test_every_own_answer_is_in_the_openai_shape(make_gateway, backend) -> None:
    gw = make_gateway()
    answers = [
        httpx.post(gw.url + "/v1/chat/completions", json={}, timeout=5),  # 401
        httpx.get(gw.url + "/sleep", headers=AUTH, timeout=5),  # 404
        httpx.get(gw.url + "/v1/models", headers={**AUTH, "X-Gateway-Probe": "x" * 40}, timeout=5),  # 403
    ]
    assert [r.status_code for r in answers] == [401, 404, 403]
    for r in answers:
        error = r.json()["error"]
        assert (
            set(error) == {"message", "type", "param", "code"}
            and error["message"]
            and error["code"] == r.status_code
        )


def test_model_list_shows_each_alias_naming_its_variant(make_gateway, backend) -> None:
    gw = switching_gateway(make_gateway)
    models = {m.id: m for m in sdk(gw).models.list()}
    assert set(models) == {SERVED, "fast", "plain"}
    assert (
        models["fast"].model_extra["variant"] == "mtp"
        and models["plain"].model_extra["variant"] == "baseline"
    )
    assert models["fast"].model_extra["parent"] == SERVED
    plain = make_gateway()  # no switching: the backend's list as it is
    assert [m["id"] for m in httpx.get(plain.url + "/v1/models", headers=AUTH).json()["data"]] == [SERVED]


def test_alias_without_a_follower_is_answered_at_once(make_gateway, backend) -> None:
    gw = switching_gateway(make_gateway, hold_timeout=60)
    gw.gateway.switcher.serving = "baseline"  # known to serve, but no follow ever polled
    body = {"model": "fast", "messages": MESSAGES, "chunks": 1}
    r = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=5)  # not 60 s
    assert r.status_code == 503 and "retry-after" in r.headers
    assert "no compose-spec follow is running for this stack" in r.json()["error"]["message"]
    assert gw.gateway.switcher.demand is None
    body["model"] = "plain"  # the serving variant's alias needs no switch
    assert httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=5).status_code == 200


def test_a_stopping_gateway_answers_held_requests_503_with_retry_after(make_gateway, backend) -> None:
    backend.state.ready = False
    gw = make_gateway(ready=False, hold_timeout=60, retry_after=4)
    answers: list[httpx.Response] = []
    body = {"model": SERVED, "messages": MESSAGES, "chunks": 1}
    asking = threading.Thread(
        target=lambda: answers.append(
            httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=30)
        )
    )
    asking.start()
    gw.wait(lambda g: g.gate.held == 1)
    gw.stop()
    asking.join(10)
    assert len(answers) == 1 and answers[0].status_code == 503, answers
    assert answers[0].headers["retry-after"] == "4"
    assert "the gateway is stopping" in answers[0].json()["error"]["message"]


def test_a_request_waiting_for_a_switch_is_answered_503_when_the_gateway_stops(make_gateway, backend) -> None:
    gw = switching_gateway(make_gateway, hold_timeout=60)
    control = GatewayControl(LocalExec(gw.config.control_socket))
    control.report_serving("baseline")
    control.next_demand(0)  # a follower polls
    answers: list[httpx.Response] = []
    body = {"model": "fast", "messages": MESSAGES, "chunks": 1}
    asking = threading.Thread(
        target=lambda: answers.append(
            httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=30)
        )
    )
    asking.start()
    assert control.next_demand(5) is not None
    gw.stop()
    asking.join(10)
    assert len(answers) == 1 and answers[0].status_code == 503
    assert "the gateway is stopping" in answers[0].json()["error"]["message"]


def test_an_http_1_0_client_gets_an_http_1_0_stream_ended_by_the_close(gateway) -> None:
    import socket

    body = json.dumps({"model": SERVED, "stream": True, "chunks": 3}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(head + body)
        data = b""
        while chunk := sock.recv(65536):  # the gateway closes at the end of the body
            data += chunk
    head_part, _, rest = data.partition(b"\r\n\r\n")
    lines = head_part.lower().split(b"\r\n")
    assert lines[0].startswith(b"http/1.0 200"), lines[0]
    assert b"transfer-encoding: chunked" not in lines and b"connection: close" in lines
    assert rest.startswith(b'data: {"i": 0') and rest.endswith(b"data: [DONE]\n\n"), rest
    # a body with its length keeps it, also in HTTP/1.0
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(b"GET /version HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.0 200") and data.endswith(b"backend /version")
    assert b"content-length: 16" in data.lower()


def test_deep_json_bodies_pass_through_untouched_when_bodies_are_read(make_gateway, backend) -> None:
    gw = switching_gateway(make_gateway)
    deep = b"[" * 50_000 + b"]" * 50_000  # under the replay limit, far past any parser's depth
    r = httpx.post(
        gw.url + "/v1/completions",
        content=deep,
        headers={**AUTH, "content-type": "application/json"},
        timeout=10,
    )
    assert r.status_code == 404 and r.text == "Not Found"  # the backend's answer: forwarded, not a 500
    assert (
        bodies.inspect(
            "POST", "/v1/completions", [], b'{"model": "x", "p": ' + b"[" * 100 + b"]" * 100 + b"}"
        )
        is None
    )
    seen = bodies.inspect("POST", "/v1/completions", [], b'{"model": "x", "prompt": [[1, 2], [3]]}')
    assert seen is not None and seen.prompt_tokens == 3


def test_the_replay_limit_is_exact_an_alias_over_it_is_never_rewritten(make_gateway, backend) -> None:
    gw = switching_gateway(make_gateway)
    control = GatewayControl(LocalExec(gw.config.control_socket))
    control.report_serving("baseline")  # `plain` names what serves: no switch needed
    control.next_demand(0)  # a follower polls

    def sized(size: int) -> bytes:
        start = json.dumps({"model": "plain", "messages": MESSAGES, "stream": False, "pad": ""}).encode()
        body = start[:-2] + b"x" * (size - len(start)) + start[-2:]
        assert len(body) == size
        return body

    for size in (REPLAY_LIMIT, REPLAY_LIMIT + 1):
        r = httpx.post(gw.url + "/v1/chat/completions", content=sized(size), headers=AUTH, timeout=10)
        assert r.status_code == 200
    assert backend.state.models == [SERVED, "plain"]  # read and renamed at the limit, untouched past it


def _stream_in_thread(gw, body: dict, out: dict) -> threading.Thread:
    """POST a request and record its status, headers and the body pieces as they came."""

    def run() -> None:
        with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=30) as r:
            out["status"], out["headers"], out["pieces"] = r.status_code, dict(r.headers), []
            for piece in r.iter_raw():
                out["pieces"].append(piece)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_held_stream_gets_headers_and_comments_then_its_tokens(make_gateway, backend) -> None:
    backend.state.ready = False
    gw = make_gateway(ready=False, hold_keepalive=0.1, hold_timeout=30)
    out: dict = {}
    streaming = _stream_in_thread(gw, {"model": SERVED, "stream": True, "chunks": 2}, out)
    quiet: dict = {}
    plain = _stream_in_thread(gw, {"model": SERVED, "stream": False}, quiet)
    gw.wait(lambda g: len(out.get("pieces", [])) >= 2)  # headers and two comments while held
    assert out["status"] == 200 and out["headers"]["content-type"].startswith("text/event-stream")
    assert "status" not in quiet  # a request that does not stream is held as before: nothing yet
    assert backend.state.arrivals == []
    backend.state.ready = True
    streaming.join(10)
    plain.join(10)
    text = b"".join(out["pieces"]).decode()
    assert text.startswith(": held by the gateway until the model is ready\n\n")
    events = [e for e in text.split("\n\n") if e and not e.startswith(":")]
    assert events[0].startswith('data: {"i": 0') and events[-1] == "data: [DONE]"
    assert quiet["status"] == 200 and json.loads(b"".join(quiet["pieces"])) == {"tag": ""}


def test_a_held_stream_refused_after_its_headers_ends_with_an_error_event(make_gateway, backend) -> None:
    backend.state.ready = False
    gw = make_gateway(ready=False, hold_keepalive=0.1, hold_timeout=0.5)
    out: dict = {}
    _stream_in_thread(gw, {"model": SERVED, "stream": True}, out).join(10)
    assert out["status"] == 200
    text = b"".join(out["pieces"]).decode()
    events = [e for e in text.split("\n\n") if e and not e.startswith(":")]
    assert events[-1] == "data: [DONE]" and text.startswith(": held")
    error = json.loads(events[-2].removeprefix("data: "))["error"]
    assert error["code"] == 503 and "hold_timeout=0.5s" in error["message"]


def test_the_control_state_says_whether_a_follower_is_attached(make_gateway, backend) -> None:
    gw = switching_gateway(make_gateway)
    control = GatewayControl(LocalExec(gw.config.control_socket))
    state = control.state()
    assert state.follower_attached is False and state.raw["switching"]["follower_seen_s_ago"] is None
    control.report_serving("baseline")  # what `up` reports too: no follower yet
    assert control.state().follower_attached is False
    control.next_demand(0)  # a follower's long poll
    state = control.state()
    assert state.follower_attached is True
    assert 0 <= state.raw["switching"]["follower_seen_s_ago"] < 30
