"""Stream continuation: a stream whose backend breaks mid-way goes on elsewhere, token for token.

The simulator's greedy output is a function of the token context, so a continued stream is
compared with an uninterrupted run of the same request, token id for token id.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from typing import Any

import httpx
import pytest

from composer.errors import GatewayConfigError
from composer.gateway.config import ENV_VARS, LIMITS, LIVE, load_config
from composer.gateway.public import continuation
from composer.gateway.status.metrics import CONTINUATION_REFUSALS, Metrics

from .livelab import (
    CHAT,
    COMPLETIONS,
    KEY,
    MAX_TOKENS,
    Client,
    body,
    check_continued,
    kill_mid_stream,
    references,
    samples,
    start_sim,
)


def url_of(sim) -> str:
    return f"http://127.0.0.1:{sim.port}"


# -- pure: eligibility, the record, the continuation request -----------------------------------


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"n": 2}, "n"),
        ({"best_of": 3}, "best_of"),
        ({"echo": True}, "echo"),
        ({"prompt_logprobs": 1}, "prompt_logprobs"),
        ({"response_format": {"type": "json_object"}}, "structured_output"),
        ({"response_format": {"type": "json_schema", "json_schema": {}}}, "structured_output"),
        ({"guided_json": {"type": "object"}}, "structured_output"),
        ({"structured_outputs": {"regex": "a+"}}, "structured_output"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"presence_penalty": 0.5}, "penalties"),
        ({"frequency_penalty": -0.1}, "penalties"),
    ],
)
def test_requests_that_cannot_be_continued_exactly_are_refused_by_reason(
    extra: dict[str, Any], reason: str
) -> None:
    metrics = Metrics()
    assert continuation.prepare(COMPLETIONS, body(0, False, **extra), metrics) is None
    assert metrics.continuation_refused.labels(reason)._value.get() == 1
    assert reason in CONTINUATION_REFUSALS


def test_eligible_and_untouched_requests() -> None:
    metrics = Metrics()
    plain = body(0, False, response_format={"type": "text"}, presence_penalty=0, n=1)
    assert continuation.prepare(COMPLETIONS, plain, metrics) is not None
    assert continuation.prepare(CHAT, body(0, True, tools=[{"x": 1}], tool_choice="none"), metrics)
    assert continuation.prepare(COMPLETIONS, {**plain, "stream": False}, metrics) is None  # untouched
    assert continuation.prepare("/v1/embeddings", plain, metrics) is None
    assert continuation.refusal(COMPLETIONS, {"prompt": ["a", "b"]}) == "batch"
    assert continuation.refusal(CHAT, {"logprobs": True}) == "logprobs"
    assert sum(metrics.continuation_refused.labels(r)._value.get() for r in CONTINUATION_REFUSALS) == 0


def sse(*events: Any) -> bytes:
    return b"".join(
        b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events
    )


def test_a_chat_record_keeps_the_ids_hides_them_and_builds_the_continuation() -> None:
    request = body(0, True, max_completion_tokens=10, min_tokens=5, request_id="r1")
    del request["max_tokens"]
    stream = continuation.Stream(True, request, Metrics())
    assert json.loads(stream.body())["return_token_ids"] is True
    assert stream._following() == (CHAT, stream.body())  # nothing reached the client: sent again
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m"}
    first = {**head, "prompt_token_ids": [1, 2], "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    second = {**head, "choices": [{"index": 0, "delta": {"content": " a b"}, "token_ids": [100, 101]}]}
    raw = sse(first, second)
    out = stream.feed(raw[:17]) + stream.feed(raw[17:])  # an event split across reads
    assert b"token_ids" not in out and b'" a b"' in out
    assert (stream.prompt_ids, stream.emitted.tolist()) == ([1, 2], [100, 101])
    sent = json.loads(stream.next_body())
    assert sent["prompt"] == [1, 2, 100, 101] and sent["max_tokens"] == 8 and sent["min_tokens"] == 3
    assert "messages" not in sent and "max_completion_tokens" not in sent and "request_id" not in sent
    assert sent["stream"] is True and sent["return_token_ids"] is True and sent["temperature"] == 0
    # a continuation event, in the chat shape with the first response's head and usage
    stream.legs, stream._base = 1, 2
    cont = {"id": "cmpl-9", "object": "text_completion", "created": 9, "model": "m"}
    out = stream.feed(
        sse(
            {**cont, "choices": [{"index": 0, "text": " c", "token_ids": [102], "prompt_token_ids": [1]}]},
            {**cont, "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}},
            b"[DONE]",
        )
    )
    events = [json.loads(line[6:]) for line in out.split(b"\n\n") if line.startswith(b"data: {")]
    assert events[0] == {**head, "choices": [{"index": 0, "delta": {"content": " c"}}]}
    assert events[1]["usage"] == {"prompt_tokens": 2, "total_tokens": 5, "completion_tokens": 3}
    assert stream.done and stream.emitted.tolist() == [100, 101, 102]


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("ids", [False, True])
def test_a_break_inside_a_character_continues_from_the_last_id_whose_text_was_sent(chat, ids) -> None:
    """vLLM holds back the text of ids that end inside a character (chunks with no text), and
    vLLM 0.32 answers a prompt ending there with the whole prompt's text in its first chunk
    (seen on real vLLM: test_continue.py). The continuation starts after the last id whose text
    was sent; it sends the held-back ids again, which the client does not get twice."""
    request = body(0, chat, ids, max_tokens=6)
    stream = continuation.Stream(chat, request, Metrics())
    head = {
        "id": "x-1",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": 7,
        "model": "m",
    }

    def first(ids_: list[int], text: str, **extra: Any) -> dict[str, Any]:
        choice = {"index": 0, "token_ids": ids_, **({"delta": {"content": text}} if chat else {"text": text})}
        return {**head, **extra, "choices": [choice]}

    events = [first([10], "a"), first([11], ""), first([12], "")]  # 11, 12: the first bytes of "é" + more
    if chat:
        events[0]["prompt_token_ids"] = [1, 2]
    else:
        events[0]["choices"][0]["prompt_token_ids"] = [1, 2]
    leg_events = [
        {"index": 0, "text": "", "token_ids": [11]},  # sent again: left out
        {"index": 0, "text": "é", "token_ids": [12, 13]},  # 12 sent again, 13 completes "é"
        {"index": 0, "text": "b", "token_ids": [14]},
        {"index": 0, "text": "c", "token_ids": [15], "finish_reason": "length"},
    ]
    cont = {"id": "cmpl-9", "object": "text_completion", "created": 9, "model": "m"}
    bodies: list[dict[str, Any]] = []

    async def chunks(raw: bytes, then: type[Exception] | None) -> Any:
        yield raw
        if then is not None:
            raise then()

    async def reopen(path: str, sent: bytes) -> continuation.Leg:
        bodies.append(json.loads(sent))
        usage = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
        raw = sse(
            *({**cont, "choices": [c]} for c in leg_events),
            {**cont, "choices": [], "usage": usage},
            b"[DONE]",
        )
        return continuation.Leg(chunks(raw, None), lambda _: None)

    async def client() -> bytes:
        leg = continuation.Leg(chunks(sse(*events), continuation.Paused), lambda _: None)
        return b"".join([out async for out in stream.relay(leg, reopen)])

    out = asyncio.run(client())
    assert (bodies[0]["prompt"], bodies[0]["max_tokens"]) == ([1, 2, 10], 5)
    got = [json.loads(line[6:]) for line in out.split(b"\n\n") if line.startswith(b"data: {")]
    texts = [stream._text(c) for e in got for c in e["choices"]]
    assert "".join(texts) == "aébc" and texts.count("") == 2  # vLLM's own empty chunks stay
    assert {(e["id"], e["object"]) for e in got} == {(head["id"], head["object"])}
    sent_ids = [i for e in got for c in e["choices"] for i in c.get("token_ids") or ()]
    assert sent_ids == ([10, 11, 12, 13, 14, 15] if ids else [])
    assert ids or b"token_ids" not in out
    assert got[-1]["usage"] == {"prompt_tokens": 2, "total_tokens": 8, "completion_tokens": 6}
    assert stream.emitted.tolist() == [10, 11, 12, 13, 14, 15] and stream.settled == 6


@pytest.mark.parametrize(
    "event",
    [
        b'{"id":"c","choices":[{"index":0,"text":" x","token_ids":[5, 6]}],"prompt_token_ids":[1,2]}',
        b'{"prompt_token_ids": [1], "id": "c", "choices": [{"token_ids": [7], "index": 0, "text": ""}]}',
        b'{"id":"c","choices":[{"index":0,"token_ids":[8]}]}',
        # look-alikes inside strings stay as they are; an unexpected place falls back to a re-encode
        rb'{"id":"c","choices":[{"index":0,"text":"\\,\"token_ids\":[9]","token_ids":[9]}]}',
        b'{"id":"c","choices":[{"index":0,"text":"a","delta":{"token_ids":[4]},"token_ids":[3]}]}',
    ],
)
def test_ids_are_cut_out_of_the_bytes_the_client_gets_as_the_record_drops_them(event: bytes) -> None:
    stream = continuation.Stream(False, body(0, False), Metrics())
    out = stream.feed(b"data: " + event + b"\n\n")
    expected = json.loads(event)
    expected.pop("prompt_token_ids", None)
    for choice in expected["choices"]:
        choice.pop("token_ids", None)
    assert out.startswith(b"data: ") and out.endswith(b"\n\n")
    assert json.loads(out[6:]) == expected
    assert stream.emitted.tolist() == [i for c in json.loads(event)["choices"] for i in c["token_ids"]]


HEAD = b'{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"","prompt_token_ids":[1,2],"token_ids":[3]}]}'
LATER = [
    # the shapes vLLM (compact) and the simulator (spaced) send mid-stream: read from the bytes
    (
        b'{"id":"c","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null,"token_ids":[5]}]}',
        True,
    ),
    (
        b'{"id": "c", "choices": [{"index": 0, "delta": {"content": " a"}, "finish_reason": null, "token_ids": [5, 6]}]}',
        True,
    ),
    (b'{"id":"c","choices":[{"index":0,"token_ids":[7],"text":"x"}],"usage":null}', True),
    # vLLM's completions chunk after the first: a null prompt_token_ids before the ids
    (
        b'{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" a",'
        b'"logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":[5]}]}',
        True,
    ),
    (b'{"id":"c","choices":[{"index":0,"text":" a","prompt_token_ids":[1],"token_ids":[5]}]}', False),
    (b'{"id":"c","choices":[{"index":0,"text":" a","token_ids":null}]}', False),
    # no text yet (the first bytes of a character): the ids are recorded, not settled
    (
        b'{"id":"c","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":null,"token_ids":[5]}]}',
        True,
    ),
    (
        b'{"id": "c", "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": null, "token_ids": [6]}]}',
        True,
    ),
    (
        rb'{"id":"c","choices":[{"index":0,"delta":{"content":"\"q"},"finish_reason":null,"token_ids":[6]}]}',
        True,
    ),
    # anything else is parsed whole, as before
    (b'{"id":"c","choices":[{"index":0,"text":"","finish_reason":"length","token_ids":[8]}]}', False),
    (b'{"id":"c","choices":[{"index":1,"text":"","finish_reason":null,"token_ids":[8]}]}', False),
    (b'{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"hm"},"token_ids":[8]}]}', False),
    (b'{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{}]},"token_ids":[8]}]}', False),
    (b'{"id":"c","choices":[{"index":0,"text":"","token_ids":[]}]}', False),
    (b'{"id":"c","token_ids":[9],"choices":[{"index":0,"text":""}]}', False),
    (b'{"id":"c","choices":[{"index":0,"text":"","logprobs":{"token_ids":[4]},"token_ids":[3]}]}', False),
    (rb'{"id":"c","choices":[{"index":0,"text":"\\,\"token_ids\":[9]","token_ids":[9]}]}', True),
    (b'{"id":"c","choices":[{"index":0,"text":"","token_ids":[1,"2"]}]}', False),
    (b'{"error":{"message":"x","token_ids":[1]}}', False),
]


@pytest.mark.parametrize(("event", "plain"), LATER)
@pytest.mark.parametrize("asked", [False, True])
def test_an_event_read_from_its_bytes_gives_what_parsing_it_gives(event, plain, asked, monkeypatch) -> None:
    assert (continuation.plain_ids(b"data: " + event) is not None) == plain
    seen = []
    for read_bytes in (True, False):
        if not read_bytes:
            monkeypatch.setattr(continuation, "plain_ids", lambda raw: None)
        stream = continuation.Stream(False, body(0, False) | {"return_token_ids": asked}, Metrics())
        stream.feed(b"data: " + HEAD + b"\n\n")
        out = stream.feed(b"data: " + event + b"\n\n")
        seen.append(
            (json.loads(out[6:]), stream.emitted.tolist(), stream.settled, stream.refused, stream.finished)
        )
        shown = json.loads(out[6:])
        # where vLLM puts them: none reaches a client that did not ask, not even a null
        kept = [
            "prompt_token_ids" in shown,
            *(set(c) & {"token_ids", "prompt_token_ids"} for c in shown.get("choices", ())),
        ]
        assert asked or not any(kept)
    assert seen[0] == seen[1]


def test_a_stream_that_shows_reasoning_or_a_tool_call_is_not_continued() -> None:
    for delta, reason in [({"reasoning_content": "hm"}, "reasoning"), ({"tool_calls": [{}]}, "tool_call")]:
        metrics = Metrics()
        stream = continuation.Stream(True, body(0, True), metrics)
        stream.feed(sse({"id": "x", "prompt_token_ids": [1], "choices": [{"index": 0, "delta": delta}]}))
        assert stream.refused == reason
        assert metrics.continuation_refused.labels(reason)._value.get() == 1


@pytest.mark.parametrize("ids", [[7, "8"], [7, 1.0], [True], [2**31]])
def test_token_ids_that_are_no_ids_refuse_the_stream_and_leave_the_record_whole(ids) -> None:
    metrics = Metrics()
    stream = continuation.Stream(False, body(0, False), metrics)
    head = {"id": "c", "object": "text_completion", "created": 1, "model": "m"}
    first = {**head, "choices": [{"index": 0, "text": "a", "token_ids": [5], "prompt_token_ids": [1]}]}
    odd = {**head, "choices": [{"index": 0, "text": "b", "token_ids": ids, "prompt_token_ids": None}]}
    stream.feed(sse(first, odd))
    assert stream.refused == "format" and stream.emitted.tolist() == [5]
    assert metrics.continuation_refused.labels("format")._value.get() == 1


def test_the_setting_is_read_checked_and_applied_in_place() -> None:
    assert "GATEWAY_CONTINUE_STREAMS" in ENV_VARS and "GATEWAY_CONTINUE_STREAMS" in LIVE
    assert "GATEWAY_CONTINUE_STREAMS" not in LIMITS  # a flag, not a number
    assert load_config({}).continue_streams is True
    config = load_config({"GATEWAY_CONTINUE_STREAMS": "false"})
    assert config.continue_streams is False
    assert config.with_settings({"GATEWAY_CONTINUE_STREAMS": "true"}).continue_streams is True
    with pytest.raises(
        GatewayConfigError, match="GATEWAY_CONTINUE_STREAMS='maybe' is invalid; allowed: true"
    ):
        load_config({"GATEWAY_CONTINUE_STREAMS": "maybe"})


# -- real simulators behind a real gateway ----------------------------------------------------


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_streams_on_a_killed_member_continue_token_for_token(sims, gateways, chat: bool) -> None:
    base, mtp = sims("baseline", scale="5"), sims("mtp", scale="5")
    gw = gateways([("baseline/1", "baseline", url_of(base)), ("mtp/1", "mtp", url_of(mtp))])
    path = CHAT if chat else COMPLETIONS
    requests = [body(i, chat, ids=i % 2 == 0) for i in range(6)]
    refs = references(base.port, path, requests)
    clients = [Client(gw.port, path, r).start() for r in requests]
    killed = kill_mid_stream(clients, lambda: (mtp.proc.kill(), mtp.proc.wait()), freeze=mtp.proc)
    for client, ref in zip(clients, refs, strict=True):
        check_continued(client.join(), ref)
    # each of the killed member's streams broke mid-way and went on (on baseline); none failed
    seen = samples(gw.url)
    assert seen["gateway_continued_streams_total"] == len(killed)
    assert seen["gateway_continuation_pause_seconds_count"] == len(killed)
    assert seen["gateway_continuation_failed_total"] == 0
    assert gw.gateway.live.members["mtp/1"].errors >= len(killed)
    assert gw.gateway.live.members["baseline/1"].outstanding == 0 and gw.gateway.gate.inflight == 0


def test_a_refused_stream_breaks_as_before_and_is_counted(sims, gateways) -> None:
    base, mtp = sims("baseline", scale="5"), sims("mtp", scale="5")
    gw = gateways([("baseline/1", "baseline", url_of(base)), ("mtp/1", "mtp", url_of(mtp))])
    requests = [body(i, False, presence_penalty=0.5) for i in range(4)]
    clients = [Client(gw.port, COMPLETIONS, r).start() for r in requests]
    killed = kill_mid_stream(clients, lambda: (mtp.proc.kill(), mtp.proc.wait()), freeze=mtp.proc)
    for client in clients:
        client.join()
    for client in killed:  # broken as without continuation: no [DONE]
        assert client.events[-1] != "[DONE]" and len(client.chunks) < MAX_TOKENS
    seen = samples(gw.url)
    assert seen['gateway_continuation_refused_total{reason="penalties"}'] == 4
    assert seen["gateway_continued_streams_total"] == 0
    assert "token_ids" not in "".join(c.raw for c in clients)  # not asked upstream either


def test_off_leaves_streams_as_they_were(sims, gateways) -> None:
    base, mtp = sims("baseline", scale="5"), sims("mtp", scale="5")
    gw = gateways(
        [("baseline/1", "baseline", url_of(base)), ("mtp/1", "mtp", url_of(mtp))], continue_streams=False
    )
    clients = [Client(gw.port, COMPLETIONS, body(i, False)).start() for i in range(4)]
    killed = kill_mid_stream(clients, lambda: (mtp.proc.kill(), mtp.proc.wait()), freeze=mtp.proc)
    for client in clients:
        client.join()
    assert all(c.events[-1] != "[DONE]" for c in killed)
    assert samples(gw.url)["gateway_continued_streams_total"] == 0


def test_the_single_upstream_continues_once_it_is_back(sims, make_single) -> None:
    sim = sims("baseline", scale="5")
    gw = make_single(url_of(sim))
    request = body(3, False, ids=True)
    (ref,) = references(sim.port, COMPLETIONS, [request])
    client = Client(gw.port, COMPLETIONS, request).start()
    client.wait_events(5)
    sim.proc.send_signal(signal.SIGKILL)
    sim.proc.wait()
    gw.wait(lambda g: not g.upstream.ready, timeout=10)
    sims("baseline", scale="5", port=sim.port)  # back at the same address
    check_continued(client.join(), ref)
    assert samples(gw.url)["gateway_continued_streams_total"] == 1


@pytest.fixture
def make_single():
    from .fakes import GatewayThread

    started = []

    def make(url: str, **settings):
        gw = GatewayThread(url, api_key=KEY, served_name="m", **settings).start()
        started.append(gw)
        gw.wait(lambda g: g.upstream.ready, timeout=30)
        return gw

    yield make
    for gw in started:
        gw.stop()


def test_a_stalled_single_upstream_is_continued_after_stall_timeout(tmp_path, make_single) -> None:
    sim = start_sim("baseline", tmp_path, scale="5")
    try:
        gw = make_single(url_of(sim), stall_timeout=0.5)
        request = body(5, True)
        (ref,) = references(sim.port, CHAT, [request])
        client = Client(gw.port, CHAT, request).start()
        client.wait_events(5)
        sim.proc.send_signal(signal.SIGSTOP)
        gw.wait(lambda g: g.metrics.stalled._value.get() == 1, timeout=10)
        sim.proc.send_signal(signal.SIGCONT)
        check_continued(client.join(), ref)
        seen = samples(gw.url)
        assert seen["gateway_continued_streams_total"] == 1
        assert seen["gateway_continuation_pause_seconds_sum"] >= 0.5
    finally:
        sim.proc.send_signal(signal.SIGCONT)
        sim.stop()


def test_paused_streams_go_on_token_for_token_with_no_failure(sims, gateways) -> None:
    base, mtp = sims("baseline", scale="5"), sims("mtp", scale="5")
    gw = gateways([("baseline/1", "baseline", url_of(base)), ("mtp/1", "mtp", url_of(mtp))])
    requests = [body(i, i % 2 == 1, ids=i % 3 == 0) for i in range(6)]
    paths = [CHAT if r.get("messages") else COMPLETIONS for r in requests]
    refs = references(base.port, paths, requests)
    clients = [Client(gw.port, p, r).start() for p, r in zip(paths, requests, strict=True)]
    paused: list[tuple[int, int]] = []

    def pause() -> None:  # what a planned switch calls, in the gateway's loop
        assert gw.loop is not None
        done = threading.Event()

        def run() -> None:
            paused.append(gw.gateway.proxy.pause_streams(url_of(mtp)))
            done.set()

        gw.loop.call_soon_threadsafe(run)
        done.wait(10)

    on_mtp = kill_mid_stream(clients, pause, freeze=mtp.proc)
    for client, ref in zip(clients, refs, strict=True):
        check_continued(client.join(), ref)
    assert paused == [(len(on_mtp), 0)]
    seen = samples(gw.url)
    assert seen["gateway_continued_streams_total"] == len(on_mtp)
    assert gw.gateway.live.members["mtp/1"].errors == 0 and gw.gateway.live.members["mtp/1"].ready
    assert gw.gateway.proxy.streams == set() and gw.gateway.gate.inflight == 0


def test_a_leaving_members_drain_sends_its_streams_on_to_the_others(sims, gateways) -> None:
    """`up` taking mtp out of {baseline, mtp}: its drain (`continue`) pauses mtp's streams, which
    go on on baseline token for token, so the drain has nothing left to wait for."""
    from composer.gateway.host.client import GatewayControl

    from .fakes import InProcessExec

    base, mtp = sims("baseline", scale="5"), sims("mtp", scale="5")
    gw = gateways([("baseline/1", "baseline", url_of(base)), ("mtp/1", "mtp", url_of(mtp))])
    requests = [body(i, i % 2 == 1) for i in range(6)]
    paths = [CHAT if r.get("messages") else COMPLETIONS for r in requests]
    refs = references(base.port, paths, requests)
    clients = [Client(gw.port, p, r).start() for p, r in zip(paths, requests, strict=True)]
    control = GatewayControl(InProcessExec(gw.config.control_socket))
    drained = []

    def leave() -> None:
        control.set_upstreams([{"name": "baseline/1", "variant": "baseline", "url": url_of(base)}])
        drained.append(control.drain_upstream("mtp/1", 60, continue_streams=True))

    on_mtp = kill_mid_stream(clients, leave, freeze=mtp.proc)
    (report,) = drained
    assert report.done and report.continued == len(on_mtp) and report.outstanding == 0 and report.refused == 0
    for client, ref in zip(clients, refs, strict=True):
        check_continued(client.join(), ref)
    assert samples(gw.url)["gateway_continuation_failed_total"] == 0


def test_a_drain_that_continues_pauses_eligible_streams_and_waits_for_the_rest(sims, make_single) -> None:
    from composer.gateway.host.client import GatewayControl

    from .fakes import InProcessExec

    base, mtp = sims("baseline", scale="5"), sims("mtp", scale="5")
    gw = make_single(url_of(base))
    eligible = [body(i, i % 2 == 1, ids=i == 0) for i in range(3)]
    paths = [CHAT if r.get("messages") else COMPLETIONS for r in eligible]
    refs = references(base.port, paths, eligible)
    clients = [Client(gw.port, p, r).start() for p, r in zip(paths, eligible, strict=True)]
    refused = Client(gw.port, COMPLETIONS, body(9, False, presence_penalty=0.5)).start()
    for client in [*clients, refused]:
        client.wait_events(5)
    control = GatewayControl(InProcessExec(gw.config.control_socket))
    report = control.drain(timeout_s=60, lease_s=30, continue_streams=True)
    # the ineligible stream finished on baseline; the eligible ones wait, paused, under the hold
    assert (report.continued, report.refused, report.drained, report.cut) == (3, 1, 1, 0)
    assert refused.join().events[-1] == "[DONE]" and len(refused.chunks) > MAX_TOKENS // 2
    assert not any(c.events and c.events[-1] == "[DONE]" for c in clients)
    control.route(url_of(mtp))
    control.release(report.hold_id)
    for client, ref in zip(clients, refs, strict=True):
        check_continued(client.join(), ref)
    seen = samples(gw.url)
    assert seen["gateway_continued_streams_total"] == 3
    assert seen["gateway_continuation_failed_total"] == 0
    assert gw.gateway.gate.inflight == 0 and gw.gateway.proxy.streams == set()


REFUSED_MID_SWITCH = {
    "n": {"n": 2},
    "best_of": {"best_of": 2},
    "echo": {"echo": True},
    "prompt_logprobs": {"prompt_logprobs": 1},
    "structured_output": {"response_format": {"type": "json_object"}},
    "penalties": {"frequency_penalty": 0.2},
}


def test_each_refused_class_sent_mid_switch_drains_counted_under_its_reason(sims, make_single) -> None:
    """A switch that continues streams still waits for those it cannot continue exactly."""
    from composer.gateway.host.client import GatewayControl

    from .fakes import InProcessExec

    base = sims("baseline", scale="5")
    gw = make_single(url_of(base))
    clients = {
        reason: Client(gw.port, COMPLETIONS, body(i, False, **extra)).start()
        for i, (reason, extra) in enumerate(REFUSED_MID_SWITCH.items())
    }
    for client in clients.values():
        client.wait_events(5)
    control = GatewayControl(InProcessExec(gw.config.control_socket))
    report = control.drain(timeout_s=120, lease_s=60, continue_streams=True)
    assert (report.continued, report.refused, report.drained, report.cut) == (
        0,
        len(clients),
        len(clients),
        0,
    )
    seen = samples(gw.url)
    for reason, client in clients.items():
        assert client.join().status == 200 and client.events[-1] == "[DONE]", (reason, client.raw[-300:])
        assert seen[f'gateway_continuation_refused_total{{reason="{reason}"}}'] == 1, reason
    assert seen["gateway_continued_streams_total"] == 0
    control.release(report.hold_id)


def test_a_stream_that_would_not_fit_in_the_next_context_drains_instead(sims, make_single) -> None:
    from composer.gateway.host.client import GatewayControl, GatewayControlError

    from .fakes import InProcessExec

    base, mtp = sims("baseline", scale="5"), sims("mtp", scale="5")
    gw = make_single(url_of(base))
    # 100 prompt ids each: 100 + 320 tokens do not fit in 350, 100 + 200 do
    long, short = body(0, False, ids=True), body(1, False, ids=True, max_tokens=200)
    ref = references(base.port, COMPLETIONS, [short])[0]
    clients = [Client(gw.port, COMPLETIONS, r).start() for r in (long, short)]
    for client in clients:
        client.wait_events(5)
    control = GatewayControl(InProcessExec(gw.config.control_socket))
    with pytest.raises(GatewayControlError, match="max_model_len=0 is invalid"):
        control.drain(timeout_s=60, lease_s=30, continue_streams=True, max_model_len=0)
    report = control.drain(timeout_s=60, lease_s=30, continue_streams=True, max_model_len=350)
    assert (report.continued, report.refused, report.drained, report.cut) == (1, 1, 1, 0)
    finished = clients[0].join()
    assert finished.events[-1] == "[DONE]" and len(finished.ids()) == MAX_TOKENS  # all on baseline
    control.route(url_of(mtp))
    control.release(report.hold_id)
    continued = clients[1].join()
    assert continued.events[-1] == "[DONE]" and continued.ids() == ref[0] and len(ref[0]) == 200
    seen = samples(gw.url)
    assert seen['gateway_continuation_refused_total{reason="max_model_len"}'] == 1
    assert seen["gateway_continued_streams_total"] == 1


@pytest.mark.parametrize(("asked", "on"), [(False, True), (True, False)])
def test_a_drain_without_continue_waits_for_streams_as_before(sims, make_single, asked, on) -> None:
    """Not asked (`up --drain`), or asked of a gateway with `continue_streams = false`."""
    from composer.gateway.host.client import GatewayControl

    from .fakes import InProcessExec

    base = sims("baseline", scale="5")
    gw = make_single(url_of(base), continue_streams=on)
    client = Client(gw.port, COMPLETIONS, body(0, False)).start()
    client.wait_events(5)
    control = GatewayControl(InProcessExec(gw.config.control_socket))
    report = control.drain(timeout_s=60, lease_s=30, continue_streams=asked)
    assert (report.continued, report.drained, report.cut) == (0, 1, 0)
    assert client.join().events[-1] == "[DONE]" and len(client.chunks) > MAX_TOKENS // 2
    assert samples(gw.url)["gateway_continued_streams_total"] == 0


def test_a_drain_that_runs_out_continues_eligible_streams_instead_of_cutting_them(sims, make_single) -> None:
    """`up --drain` with a short drain_timeout: at the timeout the eligible stream is paused
    and goes on on the next upstream, token for token; only the ineligible one is cut."""
    from composer.gateway.host.client import GatewayControl

    from .fakes import InProcessExec

    base, mtp = sims("baseline", scale="5"), sims("mtp", scale="5")
    gw = make_single(url_of(base))
    request = body(3, False)
    (ref,) = references(base.port, COMPLETIONS, [request])
    client = Client(gw.port, COMPLETIONS, request).start()
    refused = Client(gw.port, COMPLETIONS, body(4, False, presence_penalty=0.5)).start()
    for c in (client, refused):
        c.wait_events(5)
    control = GatewayControl(InProcessExec(gw.config.control_socket))
    report = control.drain(timeout_s=1, lease_s=30, continue_streams=False)
    assert (report.continued, report.drained, report.cut) == (1, 0, 1)
    assert "error" in refused.join().raw
    control.route(url_of(mtp))
    control.release(report.hold_id)
    check_continued(client.join(), ref)
    seen = samples(gw.url)
    assert seen["gateway_continued_streams_total"] == 1
    assert gw.gateway.gate.inflight == 0 and gw.gateway.proxy.streams == set()


def test_the_drain_of_a_gateway_about_to_be_replaced_cuts_at_its_timeout(sims, make_single) -> None:
    """Its streams cannot outlive it: an eligible stream still running at the timeout ends
    with the cut's error event instead of being paused for a gateway that goes away."""
    from composer.gateway.host.client import GatewayControl

    from .fakes import InProcessExec

    base = sims("baseline", scale="5")
    gw = make_single(url_of(base))
    client = Client(gw.port, COMPLETIONS, body(3, False)).start()
    client.wait_events(5)
    control = GatewayControl(InProcessExec(gw.config.control_socket))
    report = control.drain(timeout_s=1, lease_s=30, gateway_leaving=True)
    assert (report.continued, report.drained, report.cut) == (0, 0, 1)
    control.release(report.hold_id)
    assert "stream cut" in client.join().raw and client.events[-1] == "[DONE]"
    assert samples(gw.url)["gateway_continued_streams_total"] == 0


def test_the_openai_sdk_streams_a_chat_completion_through_a_switch_as_one_stream(sims, make_single) -> None:
    """A switch as `up` makes it (drain with continue, route to the new variant, release),
    mid-stream, under the official SDK: one stream, one `id`, no error, the uninterrupted text."""
    import openai

    from composer.gateway.host.client import GatewayControl

    from .fakes import InProcessExec

    base, mtp = sims("baseline", scale="5"), sims("mtp", scale="5")
    gw = make_single(url_of(base))
    request = body(7, True)
    ((_, text, prompt_tokens),) = references(base.port, CHAT, [request])
    sdk = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0, timeout=60)
    chunks: list[Any] = []
    raised: list[BaseException] = []

    def read() -> None:
        try:
            stream = sdk.chat.completions.create(
                model="m",
                messages=request["messages"],
                max_tokens=MAX_TOKENS,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
            for chunk in stream:
                chunks.append(chunk)
        except BaseException as err:  # the test asserts there is none
            raised.append(err)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    gw.wait(lambda g: len(chunks) >= 5 or raised, timeout=30)
    control = GatewayControl(InProcessExec(gw.config.control_socket))
    report = control.drain(timeout_s=60, lease_s=30, owner="up", target="mtp", continue_streams=True)
    assert (report.continued, report.drained, report.cut) == (1, 0, 0)
    paused_at = len(chunks)
    control.route(url_of(mtp))
    control.release(report.hold_id, serving="mtp", ok=True)
    reader.join(timeout=120)
    assert not reader.is_alive() and raised == []
    assert 5 <= paused_at < MAX_TOKENS  # the switch came mid-stream
    assert {c.id for c in chunks} == {chunks[0].id}
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    usage = chunks[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (prompt_tokens, MAX_TOKENS)
    assert samples(gw.url)["gateway_continued_streams_total"] == 1
    # the status page's last switch says how many streams it continued
    status = httpx.get(gw.url + "/gateway/status", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert status["switches"][0]["continued"] == 1 and status["switches"][0]["cut"] == 0


# -- the budget a continuation gets: the value the backend obeys ---------------------------


def four_of_ten(chat: bool, **limits: Any) -> continuation.Stream:
    """A stream (a request with `limits`) that emitted 4 ids, each with its text."""
    request = {k: v for k, v in body(0, chat).items() if k != "max_tokens"} | limits
    stream = continuation.Stream(chat, request, Metrics())
    head = {"id": "x", "object": "chat.completion.chunk" if chat else "text_completion", "created": 1}
    prompt = {"prompt_token_ids": [1, 2]}
    first = {**head, **(prompt if chat else {}), "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    if not chat:
        first["choices"] = [{"index": 0, "text": "", **prompt}]
    text = (lambda t: {"delta": {"content": t}}) if chat else (lambda t: {"text": t})
    later = [{**head, "choices": [{"index": 0, **text(f" w{i}"), "token_ids": [10 + i]}]} for i in range(4)]
    stream.feed(sse(first, *later))
    assert stream.emitted.tolist() == [10, 11, 12, 13] and stream.settled == 4
    return stream


@pytest.mark.parametrize(
    ("chat", "limits"),
    [
        (False, {"max_tokens": "10"}),  # vLLM reads an integer string as the integer
        (False, {"max_tokens": 10.0}),  # and an integral float
        (True, {"max_tokens": "10"}),
        (True, {"max_tokens": 10.0}),
        (False, {"max_tokens": 10, "max_completion_tokens": 500}),  # completions ignore it
        (True, {"max_completion_tokens": "10"}),
        (True, {"max_completion_tokens": 10.0, "max_tokens": 500}),  # it comes first on chat
        (True, {"max_completion_tokens": 0, "max_tokens": "10"}),  # `max_completion_tokens or max_tokens`
    ],
)
def test_a_continuation_asks_for_what_is_left_of_the_limit_the_backend_obeys(chat, limits) -> None:
    stream = four_of_ten(chat, **limits)
    sent = json.loads(stream.next_body())
    assert sent["max_tokens"] == 6 and "max_completion_tokens" not in sent
    assert stream._length() == 2 + 10


@pytest.mark.parametrize(
    ("path", "limits"),
    [
        (COMPLETIONS, {"max_tokens": "10.5"}),
        (COMPLETIONS, {"max_tokens": True}),
        (COMPLETIONS, {"max_tokens": " 1_0"}),  # vLLM takes it as 10; not guessed here
        (COMPLETIONS, {"max_tokens": 10, "min_tokens": "5.5"}),
        (CHAT, {"max_completion_tokens": "ten"}),
        (CHAT, {"max_tokens": [10]}),
    ],
)
def test_a_limit_the_gateway_cannot_read_as_vllm_does_is_refused_by_its_own_reason(path, limits) -> None:
    metrics = Metrics()
    request = {k: v for k, v in body(0, path == CHAT).items() if k != "max_tokens"} | limits
    assert continuation.prepare(path, request, metrics) is None
    assert metrics.continuation_refused.labels("max_tokens")._value.get() == 1
    assert "max_tokens" in CONTINUATION_REFUSALS
    # a stray max_completion_tokens on completions is not read at all, as vLLM does not
    stray = body(0, False, max_completion_tokens="ten")
    assert continuation.prepare(COMPLETIONS, stray, metrics) is not None


def test_min_tokens_is_read_as_the_backend_reads_it() -> None:
    sent = json.loads(four_of_ten(False, max_tokens=10, min_tokens="8").next_body())
    assert (sent["max_tokens"], sent["min_tokens"]) == (6, 4)


@pytest.mark.parametrize("chat", [False, True])
def test_a_backend_that_breaks_after_the_usage_chunk_gives_the_client_one_usage_chunk(chat) -> None:
    stream = four_of_ten(chat, max_tokens=10)
    head = {"id": "x", "object": "text_completion", "created": 1}
    rest = [{**head, "choices": [{"index": 0, "text": f" v{i}", "token_ids": [20 + i]}]} for i in range(6)]
    rest[-1]["choices"][0]["finish_reason"] = "length"
    usage = {
        **head,
        "choices": [],
        "usage": {"prompt_tokens": 2, "completion_tokens": 10, "total_tokens": 12},
    }
    reopened: list[bytes] = []

    async def chunks(raw: bytes) -> Any:
        yield raw  # then it ends without [DONE]

    async def reopen(path: str, sent: bytes) -> continuation.Leg:
        reopened.append(sent)
        raise continuation.ContinuationFailed("not expected")

    async def client() -> bytes:
        leg = continuation.Leg(chunks(sse(*rest, usage)), lambda _: None)
        return b"".join([out async for out in stream.relay(leg, reopen)])

    out = asyncio.run(client())
    events = [json.loads(line[6:]) for line in out.split(b"\n\n") if line.startswith(b"data: {")]
    assert [e["usage"] for e in events if e.get("usage")] == [usage["usage"]]
    assert out.endswith(b"data: [DONE]\n\n") and reopened == []


def test_streams_continued_at_a_switch_carry_no_more_tokens_than_their_limit(sims, make_single) -> None:
    """The limits as clients send them, read by the simulator as vLLM reads them: each
    continued stream is its uninterrupted run, its usage that of MAX_TOKENS tokens."""
    from composer.gateway.host.client import GatewayControl

    from .fakes import InProcessExec

    base, mtp = sims("baseline", scale="5"), sims("mtp", scale="5")
    gw = make_single(url_of(base))
    limits = [
        (False, {"max_tokens": str(MAX_TOKENS)}),
        (True, {"max_tokens": float(MAX_TOKENS)}),
        (False, {"max_tokens": MAX_TOKENS, "max_completion_tokens": 500}),
        (True, {"max_completion_tokens": str(MAX_TOKENS), "max_tokens": None}),
    ]
    requests = [body(i, chat, ids=i == 0, **extra) for i, (chat, extra) in enumerate(limits)]
    paths = [CHAT if chat else COMPLETIONS for chat, _ in limits]
    refs = references(base.port, paths, requests)
    clients = [Client(gw.port, p, r).start() for p, r in zip(paths, requests, strict=True)]
    for client in clients:
        client.wait_events(5)
    control = GatewayControl(InProcessExec(gw.config.control_socket))
    report = control.drain(timeout_s=60, lease_s=30, continue_streams=True)
    assert (report.continued, report.refused, report.cut) == (len(clients), 0, 0)
    control.route(url_of(mtp))
    control.release(report.hold_id)
    for client, ref in zip(clients, refs, strict=True):
        check_continued(client.join(), ref)
