"""The live set: routing decisions (pure), its settings, and real simulators behind a real gateway."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx
import pytest

from composer.errors import GatewayConfigError
from composer.gateway import GatewayControl
from composer.gateway.config import LiveSpec, load_config, parse_live
from composer.gateway.routing import live as live_module
from composer.gateway.routing.live import Member
from composer.gateway.routing.policy import WorkloadClass, parse_workloads
from composer.gateway.routing.routing import View, bucket_classes, capacity, choose_upstream, crossover
from composer.gateway.routing.upstream import Upstream
from composer.gateway.status.metrics import Metrics

from .fakes import LocalExec
from .livelab import (
    CHAT_TOKENS,
    KEY,
    LONG_TOKENS,
    WORKLOADS,
    Group,
    request,
    run_groups,
    samples,
)

CLASSES = parse_workloads(WORKLOADS)


def views(*specs: tuple[str, bool, int]) -> list[View]:
    return [View(name, name.split("/")[0], ready, out) for name, ready, out in specs]


# -- the decision (pure) ---------------------------------------------------------------------


def test_chat_goes_to_mtp_below_the_crossover_and_to_baseline_at_it() -> None:
    ups = views(("baseline/1", True, 0), ("mtp/1", True, 3))
    chosen = choose_upstream(ups, prompt_tokens=CHAT_TOKENS, classes=CLASSES)
    assert chosen is not None and (chosen.name, chosen.reason) == ("mtp/1", "class")
    ups = views(("baseline/1", True, 0), ("mtp/1", True, 4))  # crossover sqrt(1 * 16) = 4
    chosen = choose_upstream(ups, prompt_tokens=CHAT_TOKENS, classes=CLASSES)
    assert chosen is not None and (chosen.name, chosen.reason) == ("baseline/1", "crossover")


def test_long_prompts_go_to_baseline_whatever_its_load() -> None:
    ups = views(("baseline/1", True, 40), ("mtp/1", True, 0))
    chosen = choose_upstream(ups, prompt_tokens=LONG_TOKENS, classes=CLASSES)
    assert chosen is not None and (chosen.name, chosen.reason) == ("baseline/1", "class")


def test_an_alias_names_the_variant_before_any_class() -> None:
    ups = views(("baseline/1", True, 0), ("mtp/1", True, 9))
    chosen = choose_upstream(ups, alias_variant="mtp", prompt_tokens=LONG_TOKENS, classes=CLASSES)
    assert chosen is not None and (chosen.name, chosen.reason) == ("mtp/1", "alias")
    # an alias whose variant is not live: the class decides
    chosen = choose_upstream(ups, alias_variant="dflash2", prompt_tokens=LONG_TOKENS, classes=CLASSES)
    assert chosen is not None and chosen.name == "baseline/1"


def test_a_variant_without_a_ready_replica_falls_back_to_the_others() -> None:
    ups = views(("baseline/1", True, 5), ("mtp/1", False, 0))
    chosen = choose_upstream(ups, prompt_tokens=CHAT_TOKENS, classes=CLASSES)
    assert chosen is not None and (chosen.name, chosen.reason) == ("baseline/1", "fallback")
    ups = views(("baseline/1", False, 0), ("mtp/1", True, 7))
    chosen = choose_upstream(ups, prompt_tokens=LONG_TOKENS, classes=CLASSES)
    assert chosen is not None and (chosen.name, chosen.reason) == ("mtp/1", "fallback")
    assert choose_upstream(views(("mtp/1", False, 0)), prompt_tokens=1, classes=CLASSES) is None


def test_replicas_take_the_least_outstanding_then_the_least_served() -> None:
    ups = views(("baseline/1", True, 3), ("baseline/2", True, 1))
    chosen = choose_upstream(ups, prompt_tokens=LONG_TOKENS, classes=CLASSES)
    assert chosen is not None and chosen.name == "baseline/2"
    ups = [View("baseline/1", "baseline", True, 0, 10), View("baseline/2", "baseline", True, 0, 9)]
    chosen = choose_upstream(ups)
    assert chosen is not None and (chosen.name, chosen.reason) == ("baseline/2", "balance")


def test_the_crossover_field_overrides_the_derived_one() -> None:
    classes = parse_workloads("chat-1:0:1024:0:1:2=mtp,chat-16:0:1024:0:16=baseline")
    assert classes[0].crossover == 2 and classes[1].crossover is None
    ordered = bucket_classes(classes, CHAT_TOKENS)
    assert [c.name for c in ordered] == ["chat-1", "chat-16"]
    assert crossover(ordered, 0) == 2 and crossover(ordered, 1) == float("inf")
    ups = views(("baseline/1", True, 0), ("mtp/1", True, 2))
    chosen = choose_upstream(ups, prompt_tokens=CHAT_TOKENS, classes=classes)
    assert chosen is not None and chosen.name == "baseline/1"
    # only one variant in the bucket: no limit
    solo = (WorkloadClass("chat-1", 0, 1024, None, 1, "mtp"),)
    assert crossover(bucket_classes(solo, 10), 0) == float("inf")


def test_spill_sends_overflow_to_the_idle_variant_and_keeps_chat_on_mtp() -> None:
    # off by default: long prompts stay on baseline whatever its load
    ups = views(("baseline/1", True, 9), ("mtp/1", True, 1))
    chosen = choose_upstream(ups, prompt_tokens=LONG_TOKENS, classes=CLASSES)
    assert chosen is not None and chosen.name == "baseline/1"
    # on: baseline's own load is `spill` past mtp's: the long prompt spills
    chosen = choose_upstream(ups, prompt_tokens=LONG_TOKENS, classes=CLASSES, spill=2)
    assert chosen is not None and (chosen.name, chosen.reason) == ("mtp/1", "spill")
    ups = views(("baseline/1", True, 8), ("mtp/1", True, 7))
    chosen = choose_upstream(ups, prompt_tokens=LONG_TOKENS, classes=CLASSES, spill=2)
    assert chosen is not None and (chosen.name, chosen.reason) == ("baseline/1", "class")
    # mtp holds 7 spilled long requests: they do not count against chat's crossover (4),
    # and chat is not spilled off mtp by baseline's lighter total load
    ups = [View("baseline/1", "baseline", True, 6), View("mtp/1", "mtp", True, 8, spilled=7)]
    chosen = choose_upstream(ups, prompt_tokens=CHAT_TOKENS, classes=CLASSES, spill=2)
    assert chosen is not None and (chosen.name, chosen.reason) == ("mtp/1", "class")
    # the same load counted as mtp's own: chat yields at the crossover (no spill involved)
    ups = [View("baseline/1", "baseline", True, 6), View("mtp/1", "mtp", True, 8)]
    chosen = choose_upstream(ups, prompt_tokens=CHAT_TOKENS, classes=CLASSES, spill=2)
    assert chosen is not None and (chosen.name, chosen.reason) == ("baseline/1", "crossover")
    # an alias is never spilled; replicas of the same variant are not "another variant"
    ups = views(("baseline/1", True, 0), ("mtp/1", True, 9))
    chosen = choose_upstream(ups, alias_variant="mtp", classes=CLASSES, spill=1)
    assert chosen is not None and (chosen.name, chosen.reason) == ("mtp/1", "alias")
    ups = views(("baseline/1", True, 9), ("baseline/2", True, 9))
    chosen = choose_upstream(ups, prompt_tokens=LONG_TOKENS, classes=CLASSES, spill=1)
    assert chosen is not None and chosen.reason == "class"


def test_spill_stops_where_the_other_variant_reaches_its_crossover() -> None:
    # chat-1 = mtp yields at 4 outstanding: mtp takes spilled long prompts up to 3 in all
    for outstanding, expected in [(2, ("mtp/1", "spill")), (3, ("baseline/1", "class"))]:
        ups = [View("baseline/1", "baseline", True, 12), View("mtp/1", "mtp", True, outstanding, spilled=2)]
        chosen = choose_upstream(ups, prompt_tokens=LONG_TOKENS, classes=CLASSES, spill=2)
        assert chosen is not None and (chosen.name, chosen.reason) == expected, outstanding
    assert capacity(CLASSES, "mtp") == 4 and capacity(CLASSES, "baseline") == float("inf")
    # a variant no class names has no bound: the load difference alone decides
    ups = views(("baseline/1", True, 12), ("dflash2/1", True, 8))
    chosen = choose_upstream(ups, prompt_tokens=LONG_TOKENS, classes=CLASSES, spill=2)
    assert chosen is not None and (chosen.name, chosen.reason) == ("dflash2/1", "spill")


def test_spill_setting_is_checked() -> None:
    env = {"GATEWAY_UPSTREAM": "http://127.0.0.1:9"}
    assert load_config(env).spill == 0 and load_config({**env, "GATEWAY_SPILL": "2"}).spill == 2
    with pytest.raises(GatewayConfigError, match="GATEWAY_SPILL"):
        load_config({**env, "GATEWAY_SPILL": "-1"})


def test_a_member_counts_what_it_served_in_the_last_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(live_module.time, "monotonic", lambda: now[0])
    poller = Upstream("http://127.0.0.1:9", on_ready=lambda ready: None)
    member = Member(LiveSpec("mtp/1", "mtp", "http://127.0.0.1:9"), poller, Metrics())
    member.begin(spilled=True)
    assert member.view().spilled == 1
    member.end(True, spilled=True)
    member.begin()
    member.end(False)  # a failed request is not served
    now[0] += 30
    member.begin()
    member.end(True)
    assert member.served_last_minute() == 2 and member.view().spilled == 0
    now[0] += 45
    assert member.served_last_minute() == 1
    now[0] += 30
    assert member.served_last_minute() == 0 and member.served == 2


def test_a_member_that_is_down_is_probed_with_a_bounded_backoff() -> None:
    async def intervals() -> list[float]:
        up = Upstream("http://127.0.0.1:9", on_ready=lambda _: None, poll_interval=0.1, backoff_max=2.0)
        seen = []
        for failures in range(1, 8):
            up._failures = failures
            seen.append(up._interval())
        await up.aclose()
        return seen

    assert asyncio.run(intervals()) == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]


# -- settings --------------------------------------------------------------------------------


def test_live_upstreams_are_read_from_json_and_checked() -> None:
    raw = '[{"name": "mtp/1", "variant": "mtp", "url": "http://vllm-mtp-1:8000/"}]'
    config = load_config({"GATEWAY_LIVE_UPSTREAMS": raw})
    assert config.live_upstreams == (LiveSpec("mtp/1", "mtp", "http://vllm-mtp-1:8000"),)
    assert config.inspects_bodies
    assert load_config({}).live_upstreams == ()
    for bad, words in [
        ("[{", "not JSON"),
        ('{"name": "x"}', "JSON list"),
        ('[{"variant": "mtp", "url": "ftp://x"}]', "not a backend base URL"),
        ('[{"variant": "m t p", "url": "http://x"}]', "variant"),
        (
            '[{"name": "a/1", "variant": "a", "url": "http://x"}, {"name": "a/1", "variant": "a", "url": "http://y"}]',
            "twice",
        ),
        ('[{"variant": "a", "url": "http://x", "gpus": "0"}]', "an object with name, variant, url"),
    ]:
        with pytest.raises(GatewayConfigError, match=words) as err:
            load_config({"GATEWAY_LIVE_UPSTREAMS": bad})
        assert "\n" not in str(err.value)
    assert parse_live([{"variant": "mtp", "url": "http://x:1"}])[0].name == "mtp/1"


# -- real simulators behind a real gateway ----------------------------------------------------


def url_of(sim) -> str:
    return f"http://127.0.0.1:{sim.port}"


def gateway_metrics(gw) -> str:
    return httpx.get(gw.url + "/gateway/metrics", timeout=10).text


def test_chat_and_long_groups_are_served_by_their_variants(sims, gateways) -> None:
    base, mtp = sims("baseline"), sims("mtp")
    gw = gateways([("baseline/1", "baseline", url_of(base)), ("mtp/1", "mtp", url_of(mtp))])
    chat = Group("chat", gw.port, CHAT_TOKENS, 64, streams=2, requests=80)
    long = Group("long", gw.port, LONG_TOKENS, 64, streams=16, requests=120)
    run_groups(chat, long)
    assert len(chat.outcomes) + len(long.outcomes) == 200
    assert chat.failed() == long.failed() == 0
    assert chat.served()["mtp/1"] >= 0.95 * len(chat.outcomes), chat.served()
    assert long.served()["baseline/1"] >= 0.95 * len(long.outcomes), long.served()
    text = gateway_metrics(gw)
    assert 'gateway_live_requests_total{upstream="mtp/1"}' in text
    assert 'gateway_route_decisions_total{reason="class"}' in text
    status = httpx.get(gw.url + "/gateway/status", headers={"Authorization": f"Bearer {KEY}"}).json()
    listed = {u["name"]: u for u in status["upstreams"]}
    assert set(listed) == {"baseline/1", "mtp/1"} and listed["mtp/1"]["served"] >= 76
    assert 0 < listed["mtp/1"]["served_1m"] <= listed["mtp/1"]["served"]
    assert listed["baseline/1"]["spilled"] == listed["mtp/1"]["spilled"] == 0
    assert status["switch"] is None and status["demand"] is None  # routed, never switched


def test_with_spill_long_overflow_uses_mtp_and_chat_stays_there(sims, gateways) -> None:
    base, mtp = sims("baseline"), sims("mtp")
    gw = gateways([("baseline/1", "baseline", url_of(base)), ("mtp/1", "mtp", url_of(mtp))], spill=2)
    chat = Group("chat", gw.port, CHAT_TOKENS, 64, streams=2, requests=80)
    long = Group("long", gw.port, LONG_TOKENS, 64, streams=16, requests=120)
    run_groups(chat, long)
    assert chat.failed() == long.failed() == 0
    assert chat.served()["mtp/1"] >= 0.95 * len(chat.outcomes), chat.served()
    served = long.served()
    # the overflow uses mtp, bounded below chat's crossover (at most 3 in flight there of 18)
    assert served.get("mtp/1", 0) >= 0.1 * len(long.outcomes), served
    assert served.get("baseline/1", 0) > served.get("mtp/1", 0), served
    assert 'gateway_route_decisions_total{reason="spill"}' in gateway_metrics(gw)


def test_a_killed_upstream_is_taken_out_and_rejoins(sims, gateways) -> None:
    base, mtp = sims("baseline", scale="5"), sims("mtp", scale="5")
    gw = gateways([("baseline/1", "baseline", url_of(base)), ("mtp/1", "mtp", url_of(mtp))])
    chat = Group("chat", gw.port, CHAT_TOKENS, 300, streams=2, requests=10_000, stream=True)
    threads = chat.start()
    try:
        deadline = time.monotonic() + 30
        while gw.gateway.live.members["mtp/1"].outstanding < 2:
            assert time.monotonic() < deadline, "no chat streams reached mtp"
            time.sleep(0.01)
        mtp.proc.kill()  # SIGKILL: its streams die mid-way
        mtp.proc.wait()
        gw.wait(lambda g: not g.live.members["mtp/1"].ready, timeout=10)
        out_at = time.monotonic()  # taken out: every request sent from here goes to baseline
        after_kill = []
        while len(after_kill) < 4:
            after_kill = [o for o in list(chat.outcomes) if o.sent > out_at]
            time.sleep(0.05)
        assert all(o.ok and o.served_by == "baseline/1" for o in after_kill), after_kill
        sims("mtp", scale="5", port=mtp.port)  # started again at the same address
        gw.wait(lambda g: g.live.members["mtp/1"].ready, timeout=15)
        back_at = len(chat.outcomes)
        deadline = time.monotonic() + 30
        while not any(o.served_by == "mtp/1" for o in chat.outcomes[back_at:]):
            assert time.monotonic() < deadline, "mtp got no chat traffic back"
            time.sleep(0.05)
    finally:
        chat.stop.set()
        for t in threads:
            t.join(timeout=30)
    assert chat.refused() == 0
    # The 2 requests in flight on mtp when it died: a stream it had begun continues on
    # baseline, token for token (`continuation`); one it had not answered yet is sent to
    # baseline again when mtp cannot have read it (a retry), else it may have started there,
    # so it is not sent again: 502. Either way mtp counts the failure.
    failed = [o for o in chat.outcomes if not o.ok]
    assert len(failed) <= 2
    assert all(o.status == 502 for o in failed), failed  # no broken stream, never a refusal
    seen = samples(gw.url)
    continued, retried = seen["gateway_continued_streams_total"], seen["gateway_upstream_retries_total"]
    assert continued + retried + len(failed) >= 1, (continued, retried, failed)
    assert gw.gateway.live.members["mtp/1"].errors >= 1
    assert seen['gateway_live_errors_total{upstream="mtp/1"}'] > 0


def test_two_replicas_split_uniform_load(sims, gateways) -> None:
    one, two = sims("baseline"), sims("baseline")
    gw = gateways([("baseline/1", "baseline", url_of(one)), ("baseline/2", "baseline", url_of(two))])
    load = Group("uniform", gw.port, LONG_TOKENS, 64, streams=6, requests=120)
    run_groups(load)
    assert load.failed() == 0
    share = load.served()["baseline/1"] / len(load.outcomes)
    assert 0.4 <= share <= 0.6, load.served()


def test_the_host_replaces_the_set_and_drains_a_member(sims, gateways) -> None:
    base, mtp = sims("baseline", scale="5"), sims("mtp", scale="5")
    gw = gateways([("baseline/1", "baseline", url_of(base))])
    control = GatewayControl(LocalExec(gw.config.control_socket))
    added = control.set_upstreams(
        [
            {"name": "baseline/1", "variant": "baseline", "url": url_of(base)},
            {"name": "mtp/1", "variant": "mtp", "url": url_of(mtp)},
        ]
    )
    assert [(u.name, u.ready) for u in added] == [("baseline/1", True), ("mtp/1", True)]
    assert request(gw.port, CHAT_TOKENS, 8).served_by == "mtp/1"
    chat = Group("chat", gw.port, CHAT_TOKENS, 300, streams=1, requests=1, stream=True)
    threads = chat.start()
    gw.wait(lambda g: g.live.members["mtp/1"].outstanding == 1, timeout=10)
    mtp.proc.send_signal(signal.SIGSTOP)  # the stream outlasts the set's change, however slow
    try:
        left = control.set_upstreams([{"name": "baseline/1", "variant": "baseline", "url": url_of(base)}])
        assert [u.name for u in left] == ["baseline/1", "mtp/1"] and left[1].leaving
        assert request(gw.port, CHAT_TOKENS, 8).served_by == "baseline/1"  # no new request to mtp
    finally:
        mtp.proc.send_signal(signal.SIGCONT)
    drained = control.drain_upstream("mtp/1", 30)
    assert drained.done and drained.outstanding == 0
    for t in threads:
        t.join(timeout=30)
    assert chat.outcomes[0].ok and chat.outcomes[0].served_by == "mtp/1"  # it finished
    state = control.state()
    assert [u.name for u in state.upstreams] == ["baseline/1"]
    assert 'upstream="mtp/1"' not in gateway_metrics(gw)
    with pytest.raises(Exception, match="still in the live set"):
        control.drain_upstream("baseline/1", 1)


def test_an_alias_picks_its_variant_and_reaches_it_as_the_served_name(sims, gateways) -> None:
    base, mtp = sims("baseline"), sims("mtp")
    gw = gateways(
        [("baseline/1", "baseline", url_of(base)), ("mtp/1", "mtp", url_of(mtp))],
        aliases=(("fast", "mtp"), ("plain", "baseline")),
    )
    long_on_mtp = request(gw.port, LONG_TOKENS, 8, model="fast")
    assert (long_on_mtp.ok, long_on_mtp.served_by) == (True, "mtp/1")
    chat_on_base = request(gw.port, CHAT_TOKENS, 8, model="plain")
    assert (chat_on_base.ok, chat_on_base.served_by) == (True, "baseline/1")
    assert 'gateway_route_decisions_total{reason="alias"} 2.0' in gateway_metrics(gw)
