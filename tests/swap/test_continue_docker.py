"""A switch waits for no eligible stream (real daemon, simulator): sixteen greedy streams in
flight through the gateway, each with more than 1,000 tokens left, go on token for token on
the next variant through a cold switch (`up mtp`), a wake (`up baseline`, asleep since the
first switch) and a drain that runs out (`up --drain mtp` with a 2 s drain_timeout: the
streams outlast it and are continued at the timeout instead of cut). Each ends with exactly
its max_tokens, the ids and text the simulator's greedy function gives for its prompt
(computed here, no reference run), one `id`; `up --json` and `history` count 16 continued."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import time
from types import ModuleType

import pytest

from tests.conftest import REPO
from tests.gateway.livelab import Client, body

pytestmark = pytest.mark.docker

COMPLETIONS = "/v1/completions"
STREAMS = 16
MAX_TOKENS = 1500
LEFT = 1000  # tokens each stream has left at least when the switch pauses it
WARM_IDS = 50  # ids every stream has before the switch begins
DRAIN_TIMEOUT = 2  # seconds: the drain of (c) runs out long before a stream could finish
SERVED = "claude-opus-5"
TEXTGEN = REPO / "images" / "sim" / "src" / "vllm" / "sim" / "textgen.py"


def _textgen() -> ModuleType:
    """The simulator's token function, loaded from its file (stdlib only, no `vllm` package)."""
    spec = importlib.util.spec_from_file_location("sim_textgen", TEXTGEN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _requests() -> list[dict]:
    return [body(i, False, ids=True, model=SERVED, max_tokens=MAX_TOKENS) for i in range(STREAMS)]


def _expected(request: dict) -> tuple[list[int], str]:
    """The ids and text of the uninterrupted greedy run of `request` (a token-id prompt):
    the simulator's output is a function of the token context (tests/sim/test_token_ids.py)."""
    textgen = _textgen()
    key, offset = textgen.split_context(request["prompt"])
    stream = textgen.TokenStream(key, None, 0.0)  # greedy, no flips (the stack sets none)
    ids = [stream.token(offset + n) for n in range(request["max_tokens"])]
    return ids, "".join(textgen.decode_id(i) for i in ids)


def _wait_ids(clients: list[Client], count: int) -> None:
    """Wait until every stream has `count` ids (the timeout only bounds a failing test)."""
    deadline = time.monotonic() + 60
    while min(len(c.ids()) for c in clients) < count:
        assert time.monotonic() < deadline, [len(c.ids()) for c in clients]
        time.sleep(0.02)


def _through_switch(stack, label: str, argv: tuple[str, ...], outcome: str, expected: list) -> dict:
    """Sixteen streams through one switch (`argv`, an `up ... --json`): what it reported."""
    began = time.monotonic()
    clients = [Client(stack.port, COMPLETIONS, r, stack.api_key).start() for r in _requests()]
    _wait_ids(clients, WARM_IDS)
    at_start = [len(c.ids()) for c in clients]
    rate = max(at_start) / (time.monotonic() - began)  # the fastest stream's tokens a second
    switched = time.monotonic()
    up = stack.popen(*argv)
    if "--drain" in argv:  # the streams run on the old variant until the drain runs out
        time.sleep(DRAIN_TIMEOUT)  # the drain begins after up's own start: this is before it ends
        at_timeout = [len(c.ids()) for c in clients]
    try:
        out, err = up.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        up.kill()
        raise
    took = time.monotonic() - switched
    at_return = [len(c.ids()) for c in clients]
    assert up.returncode == 0, err
    result = json.loads(out.splitlines()[-1])
    left = MAX_TOKENS - max(at_start)
    # a lower bound of what each stream had left when it was paused: counted once up returned
    left_at_pause = MAX_TOKENS - max(at_return)
    timings = ", ".join(f"{k} {v:.2f}s" for k, v in result["timings"].items())
    print(
        f"\n({label}) {' '.join(argv)}: up took {took:.1f}s (its own timings: {timings}); "
        f"{left} tokens left at up's start at {rate:.0f} tok/s: {left / rate:.1f}s; "
        f"at least {left_at_pause} left at the pause"
        + (f" ({MAX_TOKENS - max(at_timeout)} {DRAIN_TIMEOUT}s into up)" if "--drain" in argv else "")
    )
    assert left_at_pause > LEFT, at_return
    # up ended long before the streams could have finished on the old variant
    assert took < 0.5 * left / rate, (took, left, rate)
    assert not any(c.events and c.events[-1] == "[DONE]" for c in clients)
    assert result["outcome"] == outcome, result
    # (c) too: no stream can finish within the drain's 2 s, so none counts as finished
    assert result["drained"] == {"finished": 0, "cut": 0, "continued": STREAMS, "refused": 0}, result

    ended = time.monotonic()
    for client, (ids, text) in zip(clients, expected, strict=True):
        client.join()
        assert client.status == 200 and client.events[-1] == "[DONE]", client.raw[-300:]
        assert not any("error" in c for c in client.chunks), client.raw[-300:]
        assert len({c["id"] for c in client.chunks}) == 1
        assert client.ids() == ids  # exactly max_tokens, none missing or repeated
        assert client.text() == text
        assert client.usage()["completion_tokens"] == MAX_TOKENS
    print(f"({label}) the streams ended {time.monotonic() - ended:.1f}s after up returned")
    return result


def test_sixteen_streams_go_on_token_for_token_through_a_cold_switch_a_wake_and_a_drain_that_runs_out(
    sim_stack,
) -> None:
    # sleep standby (a switch back wakes), and the reference box's rate doubled: a stream of
    # MAX_TOKENS lasts tens of seconds
    text = sim_stack.stack_file.read_text()
    text = text.replace("[stack.env]\n", 'standby = "sleep"\n[stack.env]\n')
    sim_stack.stack_file.write_text(text.replace('SIM_TIME_SCALE = "20"', 'SIM_TIME_SCALE = "2"'))
    expected = [_expected(r) for r in _requests()]
    done = sim_stack.run("up", "baseline", timeout=180)
    assert done.returncode == 0, done.stderr

    cold = _through_switch(sim_stack, "a", ("up", "mtp", "--json"), "swapped", expected)
    assert "wake" not in cold["timings"], cold  # mtp started from nothing
    woke = _through_switch(sim_stack, "b", ("up", "baseline", "--json"), "woke", expected)
    assert "wake" in woke["timings"], woke  # the container put to sleep by (a)
    timeout = ("--set", f"gateway.drain_timeout={DRAIN_TIMEOUT}")
    ran_out = _through_switch(sim_stack, "c", (*timeout, "up", "--drain", "mtp", "--json"), "woke", expected)
    assert ran_out["timings"]["drain"] >= DRAIN_TIMEOUT - 0.1, ran_out  # it waited the whole timeout

    done = sim_stack.run("history", "--json")
    assert done.returncode == 0, done.stderr
    events = json.loads(done.stdout)
    assert [(e["target"], e["outcome"]) for e in events[-3:]] == [
        ("mtp", "swapped"),
        ("baseline", "woke"),
        ("mtp", "woke"),
    ], events
    for event in events[-3:]:
        assert event["drained"] == {"finished": 0, "cut": 0, "continued": STREAMS, "refused": 0}, event
