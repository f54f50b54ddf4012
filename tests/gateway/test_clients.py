"""The gateway as clients meet it: the official `openai` SDK reads the gateway's own answers
(its typed errors with the reason), the model list shows the aliases, and a request that
needs a switch with no follower attached is answered at once."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

from composer.gateway.client import GatewayControl

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
