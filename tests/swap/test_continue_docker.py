"""A planned switch waits for no eligible stream: `up mtp` pauses the eight greedy streams in
flight through the gateway, switches, and each goes on on mtp, token for token, ending with
exactly its max_tokens (real daemon, simulator)."""

from __future__ import annotations

import json
import time

import pytest

from tests.gateway.livelab import Client, body

pytestmark = pytest.mark.docker

COMPLETIONS = "/v1/completions"
STREAMS = 8
MAX_TOKENS = 2000
SERVED = "claude-opus-5"


def _requests() -> list[dict]:
    return [body(i, False, ids=True, model=SERVED, max_tokens=MAX_TOKENS) for i in range(STREAMS)]


def test_up_continues_eight_streams_on_the_new_variant_token_for_token(sim_stack) -> None:
    # the reference box's rate, halved: a stream of MAX_TOKENS lasts tens of seconds
    sim_stack.stack_file.write_text(
        sim_stack.stack_file.read_text().replace('SIM_TIME_SCALE = "20"', 'SIM_TIME_SCALE = "2"')
    )
    done = sim_stack.run("up", "baseline", timeout=180)
    assert done.returncode == 0, done.stderr
    # the simulator's greedy output is a function of the token context: an uninterrupted run first
    refs = [
        c.join()
        for c in [Client(sim_stack.port, COMPLETIONS, r, sim_stack.api_key).start() for r in _requests()]
    ]
    for ref in refs:
        assert ref.status == 200 and ref.events[-1] == "[DONE]" and len(ref.ids()) == MAX_TOKENS, ref.raw[
            -300:
        ]

    began = time.monotonic()
    clients = [Client(sim_stack.port, COMPLETIONS, r, sim_stack.api_key).start() for r in _requests()]
    for client in clients:
        client.wait_events(100)
    ids_at_switch = [len(c.ids()) for c in clients]
    rate = max(ids_at_switch) / (time.monotonic() - began)  # the fastest stream's tokens a second
    switched = time.monotonic()
    done = sim_stack.run("up", "mtp", "--json", timeout=300)
    took = time.monotonic() - switched
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    left = MAX_TOKENS - max(ids_at_switch)
    print(f"up took {took:.1f}s; {left} tokens left at {rate:.0f} tok/s: {left / rate:.1f}s")
    assert left > 500, ids_at_switch
    # up ended long before the streams could have finished on the old variant
    assert took < 0.5 * left / rate, (took, left, rate)
    assert not all(c.events and c.events[-1] == "[DONE]" for c in clients)
    assert result["outcome"] == "swapped", result
    assert result["drained"] == {"finished": 0, "cut": 0, "continued": STREAMS}, result

    for client, ref in zip(clients, refs, strict=True):
        client.join()
        assert client.status == 200 and client.events[-1] == "[DONE]", client.raw[-300:]
        assert not any("error" in c for c in client.chunks), client.raw[-300:]
        assert len({c["id"] for c in client.chunks}) == 1
        assert client.ids() == ref.ids()  # exactly max_tokens, none missing or repeated
        assert client.text() == ref.text()
        assert client.usage()["completion_tokens"] == MAX_TOKENS
