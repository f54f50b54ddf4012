"""Request-driven switching and the automatic policy: the pure parts, the switcher on a fake
clock, and the gateway in front of a fake backend with the host's side played by the test."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import threading
import time

import httpx
import pytest

from composer.errors import GatewayConfigError
from composer.gateway.config import GatewayConfig, load_config
from composer.gateway.host.client import GatewayControl
from composer.gateway.public import bodies
from composer.gateway.routing.gate import Refused
from composer.gateway.routing.policy import Mix, Window, choose, decide, parse_workloads
from composer.gateway.routing.switching import Switcher
from composer.gateway.status.metrics import Metrics
from composer.stack.workload_classes import class_shape, gateway_workloads

from .conftest import KEY
from .fakes import SERVED, LocalExec

AUTH = {"Authorization": f"Bearer {KEY}"}
WORKLOADS = {"chat-1": "mtp", "chat-16": "baseline", "long-1": "baseline", "long-16": "baseline"}
CLASSES = parse_workloads(gateway_workloads(WORKLOADS))


# -- pure ---------------------------------------------------------------------------------


def test_workload_names_become_classes_and_round_trip() -> None:
    assert class_shape("chat-1").max_tokens == 512
    assert class_shape("long16000-16").tokens == 16000
    assert class_shape("long-prompt") is None and class_shape("chat") is None
    assert [c.name for c in CLASSES] == list(WORKLOADS)
    with pytest.raises(ValueError, match="NAME:MIN:MAX"):
        parse_workloads("chat-1:0:512:0=mtp")


@pytest.mark.parametrize(
    ("tokens", "streams", "expected"),
    [
        (60, 1.0, "chat-1"),
        (60, 0.8, "chat-1"),
        (60, 13.0, "chat-16"),
        (6000, 15.5, "long-16"),
        (6000, 1.0, "long-1"),
        (1000, 1.0, "chat-1"),
        (3000, 1.0, "long-1"),
    ],
)
def test_choose_nearest_bucket_then_nearest_concurrency(tokens: int, streams: float, expected: str) -> None:
    assert choose(CLASSES, Mix(tokens, streams, 10)).name == expected


def test_decide_names_the_mix_and_the_class() -> None:
    decision = decide(CLASSES, Mix(6000, 16, 40), "mtp")
    assert decision.variant == "baseline"
    assert "prompt p50 6000 tok, concurrency 16.0 over 40 requests -> long-16 = baseline" in decision.reason
    assert decide(CLASSES, None, "mtp") is None


def test_window_forgets_what_is_older_than_its_length() -> None:
    window = Window(10)
    for t in range(5):
        window.add_request(float(t), 100)
        window.sample(float(t), 1)
    window.add_request(20.0, 9000)
    window.sample(20.0, 16)
    assert window.mix(20.0) == Mix(9000.0, 16.0, 1)
    assert window.mix(20.0, min_requests=3) is None


def test_prompt_estimates() -> None:
    chat = {"messages": [{"role": "user", "content": "x" * 400}, {"content": [{"text": "y" * 40}]}]}
    assert bodies.estimate_tokens("/v1/chat/completions", chat) == 4 + 100 + 4 + 10
    assert bodies.estimate_tokens("/v1/completions", {"prompt": [1, 2, 3]}) == 3
    assert bodies.estimate_tokens("/v1/completions", {"prompt": ["abcd", "abcdefgh"]}) == 3
    seen = bodies.inspect(
        "POST", "/v1/completions", [], json.dumps({"model": "fast", "prompt": "a" * 8}).encode()
    )
    assert (seen.model, seen.prompt_tokens) == ("fast", 2)
    assert bodies.inspect("GET", "/v1/completions", [], b"{}") is None
    assert bodies.inspect("POST", "/v1/models", [], b"{}") is None
    assert bodies.inspect("POST", "/v1/completions", [(b"content-type", b"text/plain")], b"{}") is None
    assert bodies.inspect("POST", "/v1/completions", [], b"not json") is None


def test_gateway_settings_refuse_bad_switching_values() -> None:
    env = {"GATEWAY_SERVED_NAME": "m"}
    with pytest.raises(GatewayConfigError, match=r"GATEWAY_POLICY='sometimes'.*allowed: manual, auto"):
        load_config({**env, "GATEWAY_POLICY": "sometimes"})
    with pytest.raises(GatewayConfigError, match="is the served name"):
        load_config({**env, "GATEWAY_ALIASES": "m=mtp"})
    with pytest.raises(GatewayConfigError, match="given twice"):
        load_config({**env, "GATEWAY_ALIASES": "a=mtp,a=baseline"})
    with pytest.raises(GatewayConfigError, match="needs GATEWAY_WORKLOADS"):
        load_config({**env, "GATEWAY_POLICY": "auto"})
    config = load_config({**env, "GATEWAY_ALIASES": "fast=mtp", "GATEWAY_SWITCH_ON_MODEL": "true"})
    assert config.aliases == (("fast", "mtp"),) and config.inspects_bodies


# -- the switcher on a fake clock -----------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _switcher(**settings) -> tuple[Switcher, Clock, Metrics]:
    clock, metrics = Clock(), Metrics()
    config = GatewayConfig(
        served_name=SERVED,
        aliases=(("fast", "mtp"), ("plain", "baseline")),
        switch_on_model=True,
        workloads=CLASSES,
        **settings,
    )
    return Switcher(config, metrics, clock), clock, metrics


def test_alias_of_another_variant_demands_it_and_waits_for_the_report() -> None:
    async def scenario() -> None:
        sw, clock, metrics = _switcher(min_residency=30, residency_wait=5)
        sw.report("baseline", None, True)
        await sw.next_demand(0)  # a follower polls
        await sw.admit("baseline", "plain", clock.now + 10)  # serving: no wait
        waiting = asyncio.ensure_future(sw.admit("mtp", "fast", clock.now + 10))
        demand = await sw.next_demand(1.0)
        assert (demand.variant, demand.source) == ("mtp", "alias") and not waiting.done()
        second = asyncio.ensure_future(sw.admit("mtp", "fast", clock.now + 10))
        await asyncio.sleep(0.01)
        assert sw.demand is demand  # one demand, joined
        sw.report("mtp", demand.id, True)
        await asyncio.wait_for(asyncio.gather(waiting, second), 1)
        # inside the residency: a request for baseline is refused with the residency left
        clock.now += 10
        with pytest.raises(Refused) as refused:
            await sw.admit("baseline", "plain", clock.now + 60)
        assert (refused.value.status, refused.value.reason, refused.value.retry_after) == (
            503,
            "residency",
            20,
        )
        # within residency_wait of its end: it waits, then demands
        clock.now += 16
        late = asyncio.ensure_future(sw.admit("baseline", "plain", clock.now + 60))
        await asyncio.sleep(0.02)
        assert sw.demand is None and not late.done()
        clock.now += 4
        sw._notify()
        assert (await sw.next_demand(1.0)).variant == "baseline"
        late.cancel()
        assert metrics.switch_demands.labels("alias")._value.get() == 2
        assert metrics.switches.labels("alias", "ok")._value.get() == 1

    asyncio.run(scenario())


def test_up_reporting_what_serves_is_no_follower_an_alias_is_refused_at_once() -> None:
    async def scenario() -> None:
        sw, clock, _ = _switcher(min_residency=0)
        sw.report("baseline", None, True)  # what `up` reports through the control channel
        assert not sw.follower_attached() and sw.snapshot()["follower_seen_s_ago"] is None
        with pytest.raises(Refused) as refused:  # at once: a pending wait would time out here
            await asyncio.wait_for(sw.admit("mtp", "fast", clock.now + 60), 1)
        assert (refused.value.status, refused.value.reason) == (503, "no_follower")
        await sw.next_demand(0)  # a real follower's long poll
        assert sw.follower_attached()

    asyncio.run(scenario())


def test_right_after_a_switch_by_hand_an_alias_without_a_follower_is_refused_at_once() -> None:
    """`up` starts a residency: a request for another variant used to wait it out (20 s seen)
    only to hear that no follower runs, which was known at once."""

    async def scenario() -> None:
        sw, clock, _ = _switcher(min_residency=30, residency_wait=30)
        sw.report("baseline", None, True)
        sw.report("mtp", None, True)  # `up mtp`: switched by hand, the residency runs
        assert sw.residency_left() > 0 and not sw.follower_attached()
        with pytest.raises(Refused) as refused:
            await asyncio.wait_for(sw.admit("baseline", "long", clock.now + 60), 1)
        assert (refused.value.status, refused.value.reason) == (503, "no_follower")

    asyncio.run(scenario())


def test_a_report_follow_marks_as_its_own_is_a_followers_contact() -> None:
    """`follow` reports what serves when it starts: from then on an alias request waits for
    its demand to be taken instead of being refused (a request sent right after `up --with
    follow` got 503 while the follower had not long-polled yet)."""
    sw, _, _ = _switcher(min_residency=0)
    sw.report("baseline", None, True)
    assert not sw.follower_attached()
    sw.report("baseline", None, True, follower=True)
    assert sw.follower_attached() and sw.snapshot()["follower_seen_s_ago"] == 0


def test_a_failed_switch_answers_503_and_starts_a_residency() -> None:
    async def scenario() -> None:
        sw, clock, _ = _switcher(min_residency=30, residency_wait=0)
        sw.report("baseline", None, True)
        await sw.next_demand(0)  # a follower polls
        waiting = asyncio.ensure_future(sw.admit("mtp", "fast", clock.now + 10))
        demand = await sw.next_demand(1.0)
        sw.report("baseline", demand.id, False, "gate failed")
        with pytest.raises(Refused) as refused:
            await asyncio.wait_for(waiting, 1)
        assert (refused.value.status, refused.value.reason) == (503, "switch_failed")
        with pytest.raises(Refused, match="min_residency"):
            await sw.admit("mtp", "fast", clock.now + 10)

    asyncio.run(scenario())


def test_auto_policy_switches_once_per_residency() -> None:
    async def scenario() -> None:
        sw, clock, _ = _switcher(policy="auto", min_residency=20, policy_window=5)
        sw.report("mtp", None, True)
        await sw.next_demand(0)  # a follower polls
        demands = []
        for step in range(120):  # 60 s of ticks, the mix flipping every 10 s
            clock.now += 0.5
            long_phase = (step // 20) % 2 == 0
            sw.last_contact = clock.now  # a follow long-polls
            sw.observe(6000 if long_phase else 50)
            sw.tick(16 if long_phase else 1)
            if sw.demand is not None:
                demands.append((clock.now, sw.demand.variant))
                sw.report(sw.demand.variant, sw.demand.id, True)
        times = [t for t, _ in demands]
        assert len(demands) >= 2
        assert all(b - a >= 20 for a, b in itertools.pairwise(times)), demands

    asyncio.run(scenario())


def test_auto_policy_raises_no_demand_without_a_follower() -> None:
    async def scenario() -> None:
        sw, clock, _ = _switcher(policy="auto", min_residency=5, policy_window=4)
        sw.serving = "mtp"  # never reported: no follow is attached
        for _ in range(20):
            clock.now += 0.5
            for _ in range(8):
                sw.observe(8000)
            sw.tick(16)
        assert sw.demand is None and "no compose-spec follow is running" in sw.last_decision
        sw.report("mtp", None, True)  # a follow starts: it reports what serves, then polls
        await sw.next_demand(0)
        clock.now += 0.5
        sw.observe(8000)
        sw.tick(16)
        assert sw.demand is not None and sw.demand.variant == "baseline"
        clock.now += 31  # it stopped polling: a request for the pending switch is refused at once
        with pytest.raises(Refused, match="no compose-spec follow is running for this stack"):
            await sw.admit("baseline", "plain", clock.now + 60)

    asyncio.run(scenario())


def test_the_serving_variant_is_served_while_a_switch_away_is_pending() -> None:
    async def scenario() -> None:
        sw, clock, _ = _switcher(min_residency=0, max_held=2)
        sw.report("baseline", None, True)
        await sw.next_demand(0)  # a follower polls
        away = [asyncio.ensure_future(sw.admit("mtp", "fast", clock.now + 60)) for _ in range(2)]
        await asyncio.sleep(0.01)
        assert sw.demand is not None and sw.demand.variant == "mtp" and sw.queued["mtp"] == 2
        await asyncio.wait_for(sw.admit("baseline", "plain", clock.now + 60), 1)  # served at once
        with pytest.raises(Refused) as full:
            await sw.admit("mtp", "fast", clock.now + 60)
        assert full.value.status == 429 and "the queue for mtp is full" in str(full.value)
        demand = await sw.next_demand(1)  # the host takes it: the switch away is under way
        staying = asyncio.ensure_future(sw.admit("baseline", "plain", clock.now + 60))
        await asyncio.sleep(0.01)
        assert not staying.done()  # it would reach mtp: it waits for the switch back
        sw.report("mtp", demand.id, True)
        await asyncio.wait_for(asyncio.gather(*away), 1)  # mtp's queue goes on together
        assert (await sw.next_demand(1)).variant == "baseline"
        staying.cancel()

    asyncio.run(scenario())


def test_auto_policy_follows_a_phase_change_and_keeps_it() -> None:
    async def scenario() -> None:
        sw, clock, _ = _switcher(policy="auto", min_residency=5, policy_window=4)
        sw.report("mtp", None, True)
        await sw.next_demand(0)  # a follower polls
        for _ in range(20):
            clock.now += 0.5
            sw.observe(50)
            decision = sw.tick(1)
            assert decision is None or decision.variant == "mtp"  # None: fewer than 3 requests yet
        assert sw.demand is None and "keep mtp" in sw.last_decision
        for _ in range(20):
            clock.now += 0.5
            for _ in range(8):
                sw.observe(8000)
            sw.tick(16)
            if sw.demand:
                break
        assert sw.demand.variant == "baseline" and sw.demand.source == "auto"
        assert "-> long-1 = baseline (switch to)" in sw.demand.reason  # the first tick that leans long

    asyncio.run(scenario())


# -- the gateway in front of a fake backend, the host played by the test --------------------


def test_alias_request_is_held_switched_and_renamed(make_gateway, backend) -> None:
    gw = make_gateway(
        served_name=SERVED,
        aliases=(("fast", "mtp"),),
        switch_on_model=True,
        min_residency=30,
        residency_wait=0,
    )
    control = GatewayControl(LocalExec(gw.config.control_socket))
    control.report_serving("baseline")
    control.next_demand(0)  # a follower polls
    results: dict[str, tuple[int, str]] = {}

    def post(tag: str, model: str) -> None:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "tag": tag, "chunks": 1}
        r = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=30)
        results[tag] = (r.status_code, r.headers.get("retry-after", ""))

    posting = threading.Thread(target=post, args=("a", "fast"))
    posting.start()
    demand = control.next_demand(5)
    assert demand is not None and demand.variant == "mtp" and "fast" in demand.reason
    assert backend.state.models == []  # held while the host switches
    post("shared", SERVED)  # the served name always reaches whatever serves
    state = control.report_serving("mtp", demand.id, ok=True)
    posting.join(10)
    assert results["a"][0] == 200 and results["shared"][0] == 200
    assert backend.state.models == [SERVED, SERVED]  # the alias became the served name
    assert state["serving_variant"] == "mtp" and state["residency_left_s"] > 20
    post("b", "other-alias-free-name")  # not an alias: forwarded as it is
    assert backend.state.models[-1] == "other-alias-free-name"
    gw.gateway.switcher.aliases["plain"] = "baseline"
    switcher = gw.gateway.switcher
    before = switcher.residency_left()
    post("c", "plain")
    after = switcher.residency_left()
    # refused for the residency: Retry-After is what was left of it then (whole seconds)
    assert results["c"][0] == 503 and 0 < after <= before <= 30
    assert math.ceil(after) <= int(results["c"][1]) <= math.ceil(before)
    metrics = httpx.get(gw.url + "/gateway/metrics").text
    assert 'gateway_switches_total{outcome="ok",reason="alias"} 1.0' in metrics
    assert 'gateway_refused_requests_total{reason="residency"} 1.0' in metrics
    assert 'gateway_serving_variant_info{variant="mtp"} 1.0' in metrics


def test_an_automatic_demand_not_taken_is_withdrawn_when_the_traffic_stops() -> None:
    async def scenario() -> None:
        sw, clock, metrics = _switcher(policy="auto", min_residency=5, policy_window=4)
        sw.report("mtp", None, True)
        await sw.next_demand(0)  # a follower polls
        for _ in range(6):
            clock.now += 0.5
            for _ in range(4):
                sw.observe(8000)
            sw.tick(16)
        assert sw.demand is not None and sw.demand.variant == "baseline"
        clock.now += 10  # the window empties: nobody asks for baseline any more
        sw.tick(0)
        assert sw.demand is None and metrics.switch_withdrawn._value.get() == 1
        for _ in range(6):
            clock.now += 0.5
            for _ in range(4):
                sw.observe(8000)
            sw.tick(16)
        taken = await sw.next_demand(0.1)
        clock.now += 10
        sw.tick(0)
        assert sw.demand is taken  # a host runs it: it stays until reported

    asyncio.run(scenario())


def test_a_client_that_leaves_while_waiting_for_a_switch_stops_waiting_at_once(make_gateway, backend) -> None:
    gw = make_gateway(served_name=SERVED, aliases=(("fast", "mtp"),), switch_on_model=True)
    control = GatewayControl(LocalExec(gw.config.control_socket))
    control.report_serving("baseline")
    control.next_demand(0)  # a follower polls
    body = {"model": "fast", "messages": [{"role": "user", "content": "hi"}], "chunks": 1}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up after 0.5 s and closes
        httpx.post(gw.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=0.5)
    demand = control.next_demand(1)
    assert demand is not None and demand.variant == "mtp"  # the switch is still pending
    deadline = time.monotonic() + 3
    while gw.gateway.proxy.switch_waiting and time.monotonic() < deadline:
        time.sleep(0.02)
    assert gw.gateway.proxy.switch_waiting == 0  # left before the host answered the demand
    control.report_serving("mtp", demand.id, ok=True)
    assert backend.state.models == []  # nothing reached the backend for the departed client
