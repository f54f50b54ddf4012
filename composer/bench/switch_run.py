"""`bench --decide`'s switching arm, measured: the phase-changing trace replayed through the
gateway while its automatic policy switches between the plain variant and the best
speculative arm.

The stack is the user's with `policy = "auto"` (short window and residency) and a
`[workloads]` table naming the faster arm of each trace cell; `follow` runs the gateway's
demands through the gated `up` in a thread. Each phase replays the same number of requests
closed-loop; goodput is the completion tokens over the trace's wall time. Ctrl-C ends the
replay; the requests that finished are kept.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from composer.bench.client import ChatRequest, StreamResult, make_client, run_streams, stream_chat
from composer.bench.recommend import class_name
from composer.bench.sweep import BenchOptions, Progress, Workload, format_duration, latency, median, rounded
from composer.errors import BenchError
from composer.signals import waits_cancelled
from composer.stack.model import Stack

if TYPE_CHECKING:
    import docker

    from composer.swap.follow import FollowEvent

POLICY_WINDOW_S = 3
MIN_RESIDENCY_S = 6


@dataclass
class TraceRequest:
    """One replayed request: its phase, when it was sent (monotonic) and what it gave."""

    phase: int
    sent: float
    result: StreamResult | None
    error: str | None = None


@dataclass
class SwitchRun:
    """What the measured switching arm did over the trace."""

    arms: tuple[str, str]
    workloads: dict[str, str]
    phases: list[dict[str, Any]] = field(default_factory=list)
    requests: list[TraceRequest] = field(default_factory=list)
    switches: list[tuple[float, float, str]] = field(default_factory=list)  # began, ended, variant
    seconds: float = 0.0
    interrupted: str | None = None
    complete: bool = False

    def data(self) -> dict[str, Any]:
        """The run as plain data (decide.json's `switching_run`); a request is held when it was
        sent while a switch ran, and `held_request_s` is the longest time to first token of one."""
        runs = [r.result for r in self.requests if r.result is not None]
        tokens = sum(r.completion_tokens for r in runs)
        held = [
            r.result.ttft_s
            for r in self.requests
            if r.result is not None and any(a <= r.sent < b for a, b, _ in self.switches)
        ]
        times = latency([r.decode_tok_s for r in runs], [r.ttft_s for r in runs])
        return {
            "arms": list(self.arms),
            "workloads": self.workloads,
            "goodput_tok_s": round(tokens / self.seconds if self.seconds > 0 else 0.0, 2),
            "seconds": round(self.seconds, 3),
            "tokens": tokens,
            "failed_requests": len(self.requests) - len(runs),
            "switches": len(self.switches),
            "switch_s": [round(b - a, 3) for a, b, _ in self.switches],
            "switched_to": [v for _, _, v in self.switches],
            "held_request_s": round(max(held, default=0.0), 4),
            "phases": self.phases,
            "complete": self.complete,
            "interrupted": self.interrupted,
            **{k: rounded(v) for k, v in times.items()},
        }


def policy_workloads(
    phases: Sequence[tuple[int | None, int]],
    rate: Callable[[str, tuple[int | None, int]], float | None],
    arms: tuple[str, str],
    variants: Mapping[str, str],
) -> dict[str, str]:
    """Every prompt length x streams of the trace -> the variant of the arm measured faster there."""
    cells = [(t, s) for t in dict.fromkeys(p[0] for p in phases) for s in dict.fromkeys(p[1] for p in phases)]
    return {class_name(c): variants[max(arms, key=lambda a, c=c: rate(a, c) or 0.0)] for c in cells}


def switching_stack(stack: Stack, workloads: Mapping[str, str]) -> Stack:
    """The stack of the run: the automatic policy on, the trace's classes, nothing else changed."""
    gateway = replace(
        stack.gateway, policy="auto", policy_window=POLICY_WINDOW_S, min_residency=MIN_RESIDENCY_S
    )
    return replace(stack, gateway=gateway, workloads=dict(workloads))


def run_switching(
    stack: Stack,
    start: str,
    phases: Sequence[tuple[int | None, int]],
    options: BenchOptions,
    run: SwitchRun,
    *,
    client: docker.DockerClient,
    swap_timeout: float,
    allow_weak_key: bool = False,
    progress: Progress = lambda _: None,
    waiting: Progress | None = None,
) -> SwitchRun:
    """Serve `start`, follow the gateway's demands in a thread, replay the trace; fills `run`."""
    from composer.engine.health import base_url
    from composer.swap.entry import up_set
    from composer.swap.follow import follow
    from composer.swap.outcome import UpOptions

    if not stack.gateway.enabled:
        raise BenchError("the switching arm needs the gateway (gateway.enabled = true)")
    up_options = UpOptions(timeout=swap_timeout, rollback=False, allow_weak_key=allow_weak_key)
    up_set(stack, [start], client=client, options=up_options, progress=progress, waiting=waiting)
    stop = threading.Event()
    began: dict[str, float] = {}

    def emit(event: FollowEvent) -> None:
        now = time.monotonic()
        if event.event == "switch":
            began["at"] = now
        elif event.event in ("switched", "failed") and "at" in began:
            run.switches.append((began.pop("at"), now, str(event.variant)))
        if event.event != "serving":
            progress(f"switching: {event.line()}")

    follow_options = UpOptions(timeout=swap_timeout, settle=0.2, allow_weak_key=allow_weak_key)
    following = partial(follow, stack, client=client, options=follow_options, emit=emit, stop=stop)
    follower = threading.Thread(target=following, name="bench-follow", daemon=True)
    follower.start()
    url = base_url(stack.bind_address, stack.port)
    request = ChatRequest(model=stack.served_model_name, max_tokens=options.max_tokens)
    per_phase = max(p[1] for p in phases) * options.runs
    total = per_phase * len(phases)
    started = time.monotonic()

    def replay(index: int, workload: Workload) -> None:
        prompts = options.prompts_for(workload)
        lock = threading.Lock()
        halt = threading.Event()
        jobs = iter(range(per_phase))
        streams = workload.concurrency
        clients = [make_client(url, stack.api_key, options.request_timeout) for _ in range(streams)]

        def stream(s: int) -> None:
            while not halt.is_set():
                with lock:
                    j = next(jobs, None)
                if j is None:
                    return
                sent = time.monotonic()
                try:
                    got, error = stream_chat(clients[s], request, prompts[j % len(prompts)]), None
                except BenchError as err:
                    got, error = None, str(err)
                with lock:
                    run.requests.append(TraceRequest(index, sent, got, error))
                    done = len(run.requests)
                    left = (time.monotonic() - started) / done * (total - done)
                    progress(
                        f"switching: trace phase {index + 1}, {workload.label}: request {done}/{total} "
                        f"({format_duration(left)})"
                    )

        run_streams(streams, stream, clients, halt, "bench-trace")

    try:
        for i, (tokens, streams) in enumerate(phases):
            phase_began = time.monotonic()
            done_before = len(run.requests)
            replay(i, Workload(tokens, streams))
            phase_s = time.monotonic() - phase_began
            got = run.requests[done_before:]
            tpots = [1000.0 / r.result.decode_tok_s for r in got if r.result and r.result.decode_tok_s]
            run.phases.append(
                {
                    "prompt_tokens": tokens,
                    "concurrency": streams,
                    "requests": len(got),
                    "tokens": sum(r.result.completion_tokens for r in got if r.result),
                    "seconds": round(phase_s, 3),
                    "tpot_p50_ms": rounded(median(tpots), 3),
                    "switches": 0,  # counted once the run ends (a switch may end after the phase)
                }
            )
        run.complete = True
    except KeyboardInterrupt:
        run.interrupted = "interrupted"
        raise
    finally:
        run.seconds = time.monotonic() - started
        stop.set()
        # A switch under way finishes first; interrupted, its waits end and it rolls back.
        with waits_cancelled() if run.interrupted else contextlib.nullcontext():
            follower.join(swap_timeout + 30)
        for a, _, _ in run.switches:  # counted in the phase where the switch began
            index = max((r.phase for r in run.requests if r.sent <= a), default=0)
            if run.phases:
                run.phases[min(index, len(run.phases) - 1)]["switches"] += 1
    return run
