"""A replayed three-phase trace served by each fixed variant and by the automatic policy.

Run: python3 benchmarks/bench_trace.py [--time-scale 8] [--chat-requests 175] [--long-rounds 17]
     [--project NAME] [--port N] [--dflash2]

About 22 minutes with the defaults (each phase about 2 minutes on its best variant, the
fixed baseline's chat phases twice that). A switch costs 7 to 12 real seconds here
(drain, sleep, wake, gate, warm-up, `docker exec`s), so shorter phases
(`--chat-requests 60 --long-rounds 8`, about 9 minutes) measure the switch more than
the policy.

The trace: `chat` at 1 stream (short prompts), then `long` prompts at 16 streams, then
`chat` again; each phase is a fixed list of requests replayed closed-loop (each stream sends
its next request when the previous one ends); completions are not streamed and ignore EOS,
so every request produces exactly `max_tokens` tokens. Throughput of a phase = completion
tokens / its wall time (switches and held requests included).

One stack (simulator, `standby = "sleep"`, `[gateway] policy = "auto"`) with the
`[workloads]` block that `compose-spec recommend` writes from measurements of these
classes: `chat-1 = "mtp"` and `chat-16 = "baseline"` (the crossover sweep of the bench
tests), `long-16 = "baseline"` (the fixed runs below show it); a long prompt at any
concurrency maps to `long-16`, the only long class.
Fixed runs: `up VARIANT`, replay, with no `compose-spec follow` running (the gateway's
demands are then never executed). The automatic run starts on mtp with baseline asleep
and `compose-spec follow` running; the switches it ran are counted per phase.

Prints the table and writes benchmarks/results/trace.json. Exit 1 when a request failed.
Simulated seconds are real seconds times the time scale; Docker, `docker exec` and switch
overheads are real seconds, so a higher time scale makes switches relatively dearer.
Needs Docker and the simulator images (make image-sim) and the gateway image.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
WORKLOADS = {"chat-1": "mtp", "chat-16": "baseline", "long-16": "baseline"}


@dataclass(frozen=True)
class Phase:
    name: str
    streams: int
    prompt_tokens: int
    max_tokens: int
    requests: int


@dataclass
class PhaseResult:
    name: str
    seconds: float
    tokens: int
    failed: int
    switches: list[str] = field(default_factory=list)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def trace(chat_requests: int, long_rounds: int) -> list[Phase]:
    chat = Phase("chat-1", 1, 100, 300, chat_requests)
    return [
        chat,
        Phase("long-16", 16, 4500, 1000, 16 * long_rounds),
        Phase("chat-1 again", 1, 100, 300, chat_requests),
    ]


def replay(url: str, key: str, phase: Phase) -> PhaseResult:
    """Send the phase's requests on `streams` closed-loop streams; tokens and wall time."""
    jobs: queue.Queue[int] = queue.Queue()
    for i in range(phase.requests):
        jobs.put(i)
    tokens = [0]
    failed = [0]
    lock = threading.Lock()
    body = {
        "model": "claude-opus-5",
        "prompt": [11] * phase.prompt_tokens,
        "max_tokens": phase.max_tokens,
        "ignore_eos": True,
        "temperature": 0,
    }

    def stream() -> None:
        with httpx.Client(timeout=600, headers={"Authorization": f"Bearer {key}"}) as client:
            while True:
                try:
                    jobs.get_nowait()
                except queue.Empty:
                    return
                try:
                    reply = client.post(url + "/v1/completions", json=body)
                    ok = reply.status_code == 200
                    got = reply.json()["usage"]["completion_tokens"] if ok else 0
                except (httpx.HTTPError, ValueError, KeyError):
                    ok, got = False, 0
                with lock:
                    tokens[0] += got
                    failed[0] += 0 if ok else 1

    began = time.monotonic()
    threads = [threading.Thread(target=stream) for _ in range(phase.streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return PhaseResult(phase.name, time.monotonic() - began, tokens[0], failed[0])


class Follow:
    """`compose-spec follow --json` in the background; its events with arrival times."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [*command, "follow", "--json", "--settle", "0.2"],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.events: list[tuple[float, dict]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self.events.append((time.monotonic(), json.loads(line)))

    def wait_serving(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(e["event"] == "serving" for _, e in self.events):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"follow did not start: {self.events}")
            time.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def run_trace(url: str, key: str, phases: list[Phase], follow: Follow | None = None) -> list[PhaseResult]:
    results = []
    for phase in phases:
        began = time.monotonic()
        result = replay(url, key, phase)
        if follow is not None:  # switches that started during the phase
            ended = time.monotonic()
            result.switches = [
                e["variant"] for t, e in follow.events if e["event"] == "switch" and began <= t < ended
            ]
        print(
            f"  {phase.name}: {result.tok_s:.0f} tok/s in {result.seconds:.1f}s, failed {result.failed}"
            + (f", switches {result.switches}" if follow else ""),
            flush=True,
        )
        results.append(result)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=8.0, help="SIM_TIME_SCALE")
    parser.add_argument("--chat-requests", type=int, default=175, help="requests in each chat phase")
    parser.add_argument("--long-rounds", type=int, default=17, help="rounds of 16 long requests")
    parser.add_argument("--min-residency", type=int, default=20, help="gateway.min_residency, seconds")
    parser.add_argument("--window", type=int, default=4, help="gateway.policy_window, seconds")
    parser.add_argument("--project", default=f"benchtrace{secrets.token_hex(3)}")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--dflash2", action="store_true", help="also replay on a fixed dflash2")
    opts = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-trace-"))
    port = opts.port or free_port()
    workloads = "".join(f'{k} = "{v}"\n' for k, v in WORKLOADS.items())
    extra = tmp / "stack.toml"
    extra.write_text(
        f'[stack]\nproject = "{opts.project}"\nport = {port}\nstandby = "sleep"\n'
        f'[stack.env]\nSIM_LOAD_SECONDS = "0.3"\nSIM_TIME_SCALE = "{opts.time_scale}"\n'
        f'[gateway]\npolicy = "auto"\nmin_residency = {opts.min_residency}\n'
        f"policy_window = {opts.window}\nhold_timeout = 600\n[workloads]\n{workloads}",
        encoding="utf-8",
    )
    key = secrets.token_urlsafe(24)
    env = dict(os.environ, VLLM_API_KEY=key, XDG_STATE_HOME=str(tmp))
    base = [
        sys.executable, "-m", "composer", "--env-file", str(REPO / ".env.demo"),
        "--stack", str(REPO / "composer.toml"), "--stack", str(extra),
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    phases = trace(opts.chat_requests, opts.long_rounds)
    runs: dict[str, list[PhaseResult]] = {}

    def up(variant: str) -> None:
        done = subprocess.run([*base, "up", variant], env=env, cwd=REPO, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"up {variant} failed: {done.stderr}")

    try:
        fixed = ["baseline", "mtp"] + (["dflash2"] if opts.dflash2 else [])
        for variant in fixed:
            up(variant)
            print(f"fixed {variant}:", flush=True)
            runs[f"fixed {variant}"] = run_trace(url, key, phases)
        if opts.dflash2:
            up("baseline")
        up("mtp")  # baseline asleep, mtp serving
        time.sleep(opts.window + 2)  # the window empties: no demand left from the fixed runs
        follow = Follow(base, env)
        try:
            follow.wait_serving()
            print("auto:", flush=True)
            runs["auto"] = run_trace(url, key, phases, follow)
        finally:
            follow.stop()
        decisions = [e for _, e in follow.events]
    finally:
        subprocess.run([*base, "down"], env=env, cwd=REPO, capture_output=True)
    return report(runs, decisions, opts)


def report(runs: dict[str, list[PhaseResult]], decisions: list[dict], opts: argparse.Namespace) -> int:
    names = [r.name for r in next(iter(runs.values()))]
    header = f"{'run':<16}" + "".join(f"{n:>18}" for n in names) + f"{'whole trace':>14}"
    print(header)
    totals = {}
    for run, results in runs.items():
        total = sum(r.tokens for r in results) / sum(r.seconds for r in results)
        totals[run] = total
        cells = "".join(
            f"{r.tok_s:>11.0f} tok/s" + (f" {len(r.switches)}sw" if run == "auto" else "    ")
            for r in results
        )
        print(f"{run:<16}{cells}{total:>8.0f} tok/s")
    fixed = {k: v for k, v in runs.items() if k != "auto"}
    best_total = max(totals[k] for k in fixed)
    per_phase = []
    for i, name in enumerate(names):
        best = max(results[i].tok_s for results in fixed.values())
        per_phase.append((name, runs["auto"][i].tok_s / best, len(runs["auto"][i].switches)))
    for name, share, switches in per_phase:
        print(f"auto in {name}: {share:.0%} of the best fixed variant, {switches} switch(es)")
    print(
        f"auto over the whole trace: {totals['auto'] / best_total:.2f}x the best fixed variant "
        f"(time scale {opts.time_scale:g})"
    )
    failed = sum(r.failed for results in runs.values() for r in results)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "trace.json").write_text(
        json.dumps(
            {
                "options": vars(opts),
                "runs": {
                    k: [
                        {
                            "phase": r.name,
                            "seconds": round(r.seconds, 2),
                            "tokens": r.tokens,
                            "tok_s": round(r.tok_s, 1),
                            "failed": r.failed,
                            "switches": r.switches,
                        }
                        for r in v
                    ]
                    for k, v in runs.items()
                },
                "auto_share_of_best_fixed": {n: round(s, 3) for n, s, _ in per_phase},
                "auto_over_best_fixed_whole_trace": round(totals["auto"] / best_total, 3),
                "follow_events": decisions,
            },
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )
    if failed:
        print(f"{failed} requests failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
