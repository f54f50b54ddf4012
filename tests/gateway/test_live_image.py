"""The gateway image with a live set of two simulator containers: routing and a `docker kill`."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from .dockerlab import KEY, SERVED, SIM_IMAGE, Lab, build_gateway_image
from .livelab import (
    CHAT,
    CHAT_TOKENS,
    LONG_TOKENS,
    MTP,
    WORKLOADS,
    Client,
    Group,
    body,
    check_continued,
    kill_mid_stream,
    references,
    samples,
)

pytestmark = pytest.mark.docker

LIVE = [
    {"name": "baseline/1", "variant": "baseline", "url": "http://vllm-baseline-1:8000"},
    {"name": "mtp/1", "variant": "mtp", "url": "http://vllm-mtp-1:8000"},
]
SIM = {"SIM_TIME_SCALE": "10", "GPU_DEVICES": "none"}


def upstreams(lab: Lab) -> dict[str, dict]:
    status = httpx.get(lab.url + "/gateway/status", headers={"Authorization": f"Bearer {KEY}"}, timeout=5)
    return {u["name"]: u for u in status.json()["upstreams"]}


def wait_for(check, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_live_set_routes_by_class_and_survives_a_killed_upstream(docker_client) -> None:
    docker_client.images.get(SIM_IMAGE)
    build_gateway_image()
    lab = Lab(docker_client)
    try:
        lab.start({"GATEWAY_LIVE_UPSTREAMS": json.dumps(LIVE), "GATEWAY_WORKLOADS": WORKLOADS})
        lab.start_sim("baseline", alias="vllm-baseline-1", env=SIM)
        mtp = lab.start_sim(
            "mtp", alias="vllm-mtp-1", env=SIM, args=("--speculative-config", json.dumps(MTP))
        )
        lab.wait_gateway()
        wait_for(lambda: all(u["ready"] for u in upstreams(lab).values()), "both upstreams ready")
        common = {"port": lab.port, "key": KEY, "model": SERVED}
        chat = Group(
            "chat",
            prompt_tokens=CHAT_TOKENS,
            max_tokens=300,
            streams=2,
            requests=10**6,
            stream=True,
            **common,
        )
        long = Group("long", prompt_tokens=LONG_TOKENS, max_tokens=64, streams=16, requests=10**6, **common)
        threads = chat.start() + long.start()
        try:
            wait_for(
                lambda: len(chat.outcomes) >= 20 and len(long.outcomes) >= 40, "a first round of both groups"
            )
            before = len(chat.outcomes), len(long.outcomes)
            assert chat.served()["mtp/1"] >= 0.95 * before[0], chat.served()
            assert long.served()["baseline/1"] >= 0.95 * before[1], long.served()
            mtp.kill()
            wait_for(lambda: not upstreams(lab)["mtp/1"]["ready"], "mtp taken out")
            out_at = time.monotonic()  # taken out: every request sent from here goes to baseline
            wait_for(lambda: sum(o.sent > out_at for o in list(chat.outcomes)) >= 8, "chat goes on")
            after = [o for o in list(chat.outcomes) if o.sent > out_at]
            assert all(o.ok and o.served_by == "baseline/1" for o in after), after
            mtp.start()  # the same container, the same address on the lab network
            wait_for(lambda: upstreams(lab)["mtp/1"]["ready"], "mtp back after its health check")
            back_at = len(chat.outcomes)
            wait_for(lambda: any(o.served_by == "mtp/1" for o in chat.outcomes[back_at:]), "chat back on mtp")
        finally:
            chat.stop.set()
            long.stop.set()
            for t in threads:
                t.join(timeout=120)
        assert chat.refused() == long.refused() == 0
        assert long.failed() == 0
        # the streams in flight on mtp when it was killed: one it had begun continues on
        # baseline (`continuation`); one it had not answered may have started there: 502
        failed = [o for o in chat.outcomes if not o.ok]
        assert len(failed) <= 2 and all(o.status == 502 for o in failed), failed
        listed = upstreams(lab)
        assert listed["mtp/1"]["errors"] >= chat.failed()
        metrics = httpx.get(lab.url + "/gateway/metrics", timeout=5).text
        assert 'gateway_route_decisions_total{reason="class"}' in metrics
    finally:
        lab.cleanup()


def test_streams_on_a_killed_member_container_continue_token_for_token(docker_client) -> None:
    docker_client.images.get(SIM_IMAGE)
    build_gateway_image()
    lab = Lab(docker_client)
    try:
        lab.start({"GATEWAY_LIVE_UPSTREAMS": json.dumps(LIVE), "GATEWAY_WORKLOADS": WORKLOADS})
        slow = {**SIM, "SIM_TIME_SCALE": "5"}  # a stream lasts a few seconds: killed mid-way
        lab.start_sim("baseline", alias="vllm-baseline-1", env=slow)
        mtp = lab.start_sim(
            "mtp", alias="vllm-mtp-1", env=slow, args=("--speculative-config", json.dumps(MTP))
        )
        lab.wait_gateway()
        wait_for(lambda: all(u["ready"] for u in upstreams(lab).values()), "both upstreams ready")
        requests = [body(i, True, ids=i % 2 == 0, model=SERVED) for i in range(8)]
        refs = references(lab.port, CHAT, requests, KEY)  # uninterrupted (greedy: deterministic)
        clients = [Client(lab.port, CHAT, r, KEY).start() for r in requests]
        killed = kill_mid_stream(clients, mtp.kill)
        for client, ref in zip(clients, refs, strict=True):
            check_continued(client.join(), ref)
        seen = samples(lab.url)
        assert seen["gateway_continued_streams_total"] == len(killed)
        assert seen["gateway_continuation_failed_total"] == 0
    finally:
        lab.cleanup()
