"""A planned switch with 16 long generations in flight, on the simulator: stream continuation
on (the default: the streams pause and go on on the new variant) against off (`--set
gateway.continue_streams=false`: `up` drains, it waits for the streams), and the switch alone.

Each case runs in a project of its own (own port, state and key; the stack of the swap
tests' sim_stack, at SIM_TIME_SCALE=2: the profile gives 57.5 tok/s per stream at 16 streams
on baseline, 50 measured on a 2-CPU host, so a stream of 2000 tokens lasts over 30 s): `up baseline`, 16 streamed greedy completions of
MAX_TOKENS (100 prompt tokens each, token ids asked for), and once each has 100 events,
`up mtp --json`. Figures:
- up_s: the wall time of `up mtp` (the CLI's process, its start included);
- longest_pause_s: the largest gap between two consecutive events of any stream, counting
  the gaps that end after `up` began (longest_gap_before_switch_s: those that end before, the
  host's jitter);
- per stream: its pause (its own largest such gap), with continuation the tokens re-prefilled
  (its prompt + the tokens it had received before that gap), and whether it ended well (200,
  `[DONE]`, no error event, exactly MAX_TOKENS token ids and completion_tokens);
- physics: `up mtp` with no stream in flight (`switch_s`, a project of its own), and the
  re-prefill: the 16 re-prefilled prompts (prompt + tokens received at the pause) sent at once
  to mtp with max_tokens 1 once the continued streams ended, until the last one answered.
Targets (continuation on): up_s <= switch_s + 1 s; longest_pause_s <= switch_s + re-prefill
+ 0.5 s.

Needs Docker, the simulator images and the gateway image (`make image-sim image-gateway`).
Run: .venv/bin/python benchmarks/bench_continue.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import docker

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import free_port, isolated_env, remove_project  # noqa: E402
from tests.gateway.livelab import Client, body, samples  # noqa: E402
from tests.swap.conftest import Stack  # noqa: E402

STREAMS = 16
MAX_TOKENS = 2000
AT_SWITCH = 100  # events each stream has when `up mtp` starts
SERVED = "claude-opus-5"
COMPLETIONS = "/v1/completions"
OFF = ("--set", "gateway.continue_streams=false")
STACK = """[stack]
project = "{project}"
port = {port}
probation = "0s"
[stack.env]
SIM_LOAD_SECONDS = "0.3"
SIM_TIME_SCALE = "2"
"""


class Timed(list):
    """A Client's events, with when each arrived (`times`)."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def append(self, item: Any) -> None:
        self.times.append(time.monotonic())
        super().append(item)


def new_stack(folder: Path) -> Stack:
    """A project of its own under `folder`: own name, port, state and key."""
    project, port = f"vctbc{uuid.uuid4().hex[:10]}", free_port()
    stack_file = folder / "stack.toml"
    stack_file.write_text(STACK.format(project=project, port=port), encoding="utf-8")
    env = isolated_env(folder)
    return Stack(project, port, env["VLLM_API_KEY"], env, stack_file)


def up(stack: Stack, variant: str, *sets: str) -> tuple[float, dict[str, Any]]:
    """`up VARIANT --json`: (wall seconds, its result)."""
    began = time.monotonic()
    done = stack.run(*sets, "up", variant, "--json", timeout=300)
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr[-2000:]
    return took, json.loads(done.stdout.splitlines()[-1])


def pause(client: Client, since: float, until: float = math.inf) -> tuple[float, int]:
    """(the stream's largest gap between events that ends after `since` and by `until`, the
    token ids it had received before that gap)."""
    times = client.events.times
    gaps = [(times[i] - times[i - 1], i) for i in range(1, len(times)) if since < times[i] <= until]
    gap, at = max(gaps, default=(0.0, len(times)))
    received = sum(
        len(ch.get("token_ids") or ())
        for c in client.events[:at]
        if isinstance(c, dict)
        for ch in c.get("choices") or ()
    )
    return gap, received


def ended_well(client: Client) -> bool:
    usage = client.usage() or {}
    return (
        client.status == 200
        and client.events[-1:] == ["[DONE]"]
        and not any("error" in c for c in client.chunks)
        and len(client.ids()) == MAX_TOKENS
        and usage.get("completion_tokens") == MAX_TOKENS
    )


def requests() -> list[dict[str, Any]]:
    return [body(i, False, ids=True, model=SERVED, max_tokens=MAX_TOKENS) for i in range(STREAMS)]


def switch_alone(folder: Path) -> dict[str, Any]:
    """`up mtp` from baseline with nothing in flight."""
    stack = new_stack(folder)
    try:
        up(stack, "baseline")
        took, result = up(stack, "mtp")
        return {"switch_s": round(took, 3), "timings": result.get("timings")}
    finally:
        remove_project(docker.from_env(), stack.project)


def reprefill_s(stack: Stack, prompts: list[list[int]]) -> float:
    """The prompts sent at once with max_tokens 1: until the last one answered."""
    began = time.monotonic()
    runs = [
        Client(
            stack.port,
            COMPLETIONS,
            {**body(0, False, model=SERVED, max_tokens=1), "prompt": p},
            stack.api_key,
        )
        for p in prompts
    ]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
        assert run.status == 200 and run.events[-1:] == ["[DONE]"], run.raw[-300:]
    return time.monotonic() - began


def with_streams(folder: Path, on: bool) -> dict[str, Any]:
    """The switch with STREAMS streams in flight, continuation on or off."""
    stack = new_stack(folder)
    sets = () if on else OFF
    try:
        up(stack, "baseline", *sets)
        began = time.monotonic()
        clients = [
            Client(stack.port, COMPLETIONS, r, stack.api_key, events=Timed()).start() for r in requests()
        ]
        for client in clients:
            client.wait_events(AT_SWITCH)
        at_switch = [len(c.ids()) for c in clients]
        rate = statistics.mean(at_switch) / (time.monotonic() - began)
        switched = time.monotonic()
        took, result = up(stack, "mtp", *sets)
        for client in clients:
            client.join()
        paused = [pause(client, switched) for client in clients]
        streams = [
            {
                "pause_s": round(gap, 3),
                **({"reprefill_tokens": len(client.body["prompt"]) + received} if on else {}),
                "ok": ended_well(client),
            }
            for client, (gap, received) in zip(clients, paused, strict=True)
        ]
        figures = {
            "up_s": round(took, 3),
            "outcome": result.get("outcome"),
            "drained": result.get("drained"),
            "timings": result.get("timings"),
            "tokens_at_switch": [min(at_switch), max(at_switch)],
            "tokens_left_at_switch": MAX_TOKENS - max(at_switch),
            "baseline_tok_s_per_stream": round(rate, 1),
            "seconds_left_at_switch": round((MAX_TOKENS - max(at_switch)) / rate, 1),
            "longest_pause_s": max(s["pause_s"] for s in streams),
            "longest_gap_before_switch_s": round(max(pause(c, 0, switched)[0] for c in clients), 3),
            "median_pause_s": round(statistics.median(s["pause_s"] for s in streams), 3),
            "streams_ok": sum(s["ok"] for s in streams),
            "streams": streams,
        }
        if on:
            prompts = [[*c.body["prompt"], *c.ids()[:n]] for c, (_, n) in zip(clients, paused, strict=True)]
            figures["reprefill_s"] = round(reprefill_s(stack, prompts), 3)
            metrics = samples(f"http://127.0.0.1:{stack.port}")
            figures["gateway_continued_streams_total"] = metrics.get("gateway_continued_streams_total")
            count = metrics.get("gateway_continuation_pause_seconds_count") or 0
            figures["gateway_pause_mean_s"] = (
                round(metrics.get("gateway_continuation_pause_seconds_sum", 0) / count, 3) if count else None
            )
        return figures
    finally:
        remove_project(docker.from_env(), stack.project)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-continue-") as tmp:
        folders = [Path(tmp) / name for name in ("alone", "on", "off")]
        for folder in folders:
            folder.mkdir()
        physics = switch_alone(folders[0])
        on = with_streams(folders[1], on=True)
        off = with_streams(folders[2], on=False)
    switch, reprefill = physics["switch_s"], on["reprefill_s"]
    report = {
        "streams": STREAMS,
        "max_tokens": MAX_TOKENS,
        "sim_time_scale": 2,
        "physics": {**physics, "reprefill_s": reprefill},
        "continue_on": on,
        "continue_off": off,
        "targets": {
            "up_s": {"limit": round(switch + 1, 3), "on": on["up_s"], "met": on["up_s"] <= switch + 1},
            "longest_pause_s": {
                "limit": round(switch + reprefill + 0.5, 3),
                "on": on["longest_pause_s"],
                "met": on["longest_pause_s"] <= switch + reprefill + 0.5,
            },
        },
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    text = json.dumps(report, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(f"switch alone: up mtp {switch:.2f}s; re-prefill of {STREAMS} prompts {reprefill:.2f}s")
    for name, case in (("on", on), ("off", off)):
        print(
            f"continue {name}: up {case['up_s']:.2f}s, longest pause {case['longest_pause_s']:.2f}s "
            f"(median {case['median_pause_s']:.2f}s), drained {case['drained']}, "
            f"{case['streams_ok']}/{STREAMS} streams with exactly {MAX_TOKENS} tokens"
        )
    print(json.dumps(report["targets"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
