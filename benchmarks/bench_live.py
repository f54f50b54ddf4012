"""Live routing vs homogeneous pairs on a mixed trace, and the gateway's CPU per request.

Run: .venv/bin/python benchmarks/bench_live.py [--time-scale 8] [--chat-requests 40]
     [--long-rounds 3] [--cpu-requests 400] [--trace mixed|chat|long] [--arms A,B] [--json PATH]

Arms (the same requests each):
  2 x baseline, 2 x mtp, and baseline + mtp routed by the live gateway (`[workloads]` as
  `recommend --write` fills it: chat-1 = mtp, chat-16 = baseline, long-16 = baseline), once
  with GATEWAY_SPILL=2 (`routed`: a variant's overflow goes to the other's idle container)
  and once without (`routed no spill`, the gateway's default); two simulator processes
  each. `auto switched`: one simulator process behind the gateway with GATEWAY_POLICY=auto
  (window 3 s, residency 6 s, as `bench --decide`'s switching arm), mtp first; a follower
  thread takes each switch demand from the control socket and makes it as `up` does (hold
  and drain, stop, start the other variant, wait until ready, route, release). A switch
  costs the simulator's start (about a second), far less than a real vLLM's.
The trace is bench_trace.py's two classes, sent at once as two interleaved client groups (not
phases; `--trace chat` or `long`: that group alone): `chat` at 1 stream (100-token prompts, 300 tokens out) and `long` at 16 streams
(4500-token prompts, 1000 tokens out), each closed-loop. Completions are streamed and ignore
EOS, so each request yields `max_tokens` tokens. Per group: goodput (tokens of the
successful requests / the group's wall time), TTFT and TPOT p50/p95 (TPOT: seconds between
the first and the last token event / (tokens - 1)). Times are real seconds; the simulator runs at
SIM_TIME_SCALE (simulated seconds = real seconds x the scale).

CPU: the gateway process's user+system CPU seconds per request (/proc/PID/stat) for
`--cpu-requests` small streamed completions at 8 streams (the clock tick is 10 ms: use
enough requests), with the single upstream
(`GATEWAY_UPSTREAM`), a live set of 1 and a live set of 2; the simulators at SIM_TIME_SCALE
1000 so the gateway is the work. The gateway runs as its own process
(`python -m composer.gateway`), no Docker needed. Writes JSON to --json
(default benchmarks/results/live.json). Exit 1 when a request failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.sim.simproc import SIM_MODEL, SimProcess, free_port  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
KEY = "bench-live-key"
MTP = {"method": "mtp", "num_speculative_tokens": 7}
WORKLOADS = "chat-1:0:1024:0:1=mtp,chat-16:0:1024:0:16=baseline,long-16:1025:0:0:16=baseline"
SPILL = "2"  # the routed arm's GATEWAY_SPILL (the gateway's default is 0: off)
ARMS = {
    "2 x baseline": ("baseline", "baseline"),
    "2 x mtp": ("mtp", "mtp"),
    "routed": ("baseline", "mtp"),
    "routed no spill": ("baseline", "mtp"),
    "auto switched": ("mtp",),
}
AUTO_WINDOW_S = "3"  # the auto arm's GATEWAY_POLICY_WINDOW and GATEWAY_MIN_RESIDENCY, as
AUTO_RESIDENCY_S = "6"  # composer/bench/switch_run.py sets them for a trace of a few dozen requests


@dataclass
class Sample:
    ok: bool
    tokens: int = 0
    ttft: float = 0.0
    tpot: float = 0.0
    served_by: str = ""


@dataclass
class GroupResult:
    name: str
    seconds: float = 0.0
    samples: list[Sample] = field(default_factory=list)

    def row(self) -> dict[str, float | int | dict[str, int]]:
        ok = [s for s in self.samples if s.ok]
        tokens = sum(s.tokens for s in ok)

        def pct(values: list[float], q: int) -> float:
            if len(values) < 2:
                return values[0] if values else 0.0
            return statistics.quantiles(values, n=100, method="inclusive")[q - 1]

        ttft = [s.ttft for s in ok]
        tpot = [s.tpot for s in ok if s.tpot]
        served: dict[str, int] = {}
        for s in ok:
            served[s.served_by] = served.get(s.served_by, 0) + 1
        return {
            "requests": len(self.samples),
            "failed": len(self.samples) - len(ok),
            "goodput_tok_s": round(tokens / self.seconds, 1) if self.seconds else 0.0,
            "ttft_p50_ms": round(pct(ttft, 50) * 1000, 1),
            "ttft_p95_ms": round(pct(ttft, 95) * 1000, 1),
            "tpot_p50_ms": round(pct(tpot, 50) * 1000, 2),
            "tpot_p95_ms": round(pct(tpot, 95) * 1000, 2),
            "served_by": served,
        }


def one_stream(client: httpx.Client, url: str, prompt: int, max_tokens: int) -> Sample:
    body = {
        "model": "m",
        "prompt": [11] * prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    began = time.monotonic()
    times: list[float] = []
    try:
        with client.stream("POST", url + "/v1/completions", json=body) as reply:
            served = reply.headers.get("x-served-by", "")
            if reply.status_code != 200:
                reply.read()
                return Sample(False)
            done = False
            for line in reply.iter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    continue
                event = json.loads(line[6:])
                if event.get("choices") and event["choices"][0].get("text") is not None:
                    times.append(time.monotonic())
    except (httpx.HTTPError, ValueError):
        return Sample(False)
    if not done or not times:
        return Sample(False)
    # a speculative variant sends several tokens per event: per token, as vLLM's TPOT
    tpot = (times[-1] - times[0]) / (max_tokens - 1) if max_tokens > 1 else 0.0
    return Sample(True, max_tokens, times[0] - began, tpot, served)


def run_group(url: str, name: str, streams: int, requests: int, prompt: int, max_tokens: int) -> GroupResult:
    left = [requests]
    lock = threading.Lock()
    result = GroupResult(name)

    def worker() -> None:
        with httpx.Client(timeout=600, headers={"Authorization": f"Bearer {KEY}"}) as client:
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                sample = one_stream(client, url, prompt, max_tokens)
                with lock:
                    result.samples.append(sample)

    began = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.seconds = time.monotonic() - began
    return result


HYBRID = ["1"]  # SIM_HYBRID_MODEL of every simulator (--no-hybrid: "0")


def start_sim(variant: str, scale: str, log_dir: Path) -> SimProcess:
    args = [str(SIM_MODEL), "--served-model-name", "m"]
    if variant == "mtp":
        args += ["--speculative-config", json.dumps(MTP)]
    env = {"SIM_TIME_SCALE": scale, "SIM_HYBRID_MODEL": HYBRID[0]}
    return SimProcess.start(args, env=env, api_key=KEY, log_dir=log_dir)


@contextmanager
def simulators(variants: tuple[str, ...], scale: str, log_dir: Path) -> Iterator[list[str]]:
    sims = []
    try:
        for variant in variants:
            sims.append(start_sim(variant, scale, log_dir))
        for sim in sims:
            sim.wait_ready(60)
        yield [f"http://127.0.0.1:{sim.port}" for sim in sims]
    finally:
        for sim in sims:
            sim.stop()


@contextmanager
def gateway(env: dict[str, str], log_dir: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    full = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "VLLM_"))},
        "PYTHONPATH": str(REPO),
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": str(port),
        "GATEWAY_CONTROL_SOCKET": str(log_dir / f"gw-{port}.sock"),
        "GATEWAY_SERVED_NAME": "m",
        "GATEWAY_LOG_LEVEL": "warning",
        "VLLM_API_KEY": KEY,
        **env,
    }
    with open(log_dir / f"gw-{port}.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "composer.gateway"], env=full, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/gateway/health", timeout=1).json().get("backend_ready"):
                    break
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("gateway did not get ready: " + (log_dir / f"gw-{port}.log").read_text())
            time.sleep(0.05)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def live_env(names: tuple[str, ...], urls: list[str], spill: str = "0") -> dict[str, str]:
    counts: dict[str, int] = {}
    items = []
    for variant, url in zip(names, urls, strict=True):
        counts[variant] = counts.get(variant, 0) + 1
        items.append({"name": f"{variant}/{counts[variant]}", "variant": variant, "url": url})
    return {
        "GATEWAY_LIVE_UPSTREAMS": json.dumps(items),
        "GATEWAY_WORKLOADS": WORKLOADS,
        "GATEWAY_SPILL": spill,
    }


class Follower:
    """The auto arm's host: takes the gateway's switch demands over its control socket and
    makes each one as `up` does (hold and drain, stop the one container, start the demanded
    variant and wait until it is ready, route, release), in a thread."""

    def __init__(self, sock: Path, sim: SimProcess, variant: str, scale: str, log_dir: Path) -> None:
        self.client = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://gw", timeout=90
        )
        self.sim, self.variant, self.scale, self.log_dir = sim, variant, scale, log_dir
        self.switches: list[dict[str, float | str]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def __enter__(self) -> Follower:
        self.client.post("/serving", json={"variant": self.variant}).raise_for_status()
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.client.close()
        self.sim.stop()

    def run(self) -> None:
        while not self.stopping.is_set():
            found = self.client.get("/demand", params={"wait_s": 0.5}).json().get("demand")
            if found:
                self.switch(str(found["id"]), str(found["variant"]))

    def switch(self, demand_id: str, variant: str) -> None:
        began = time.monotonic()
        reply = self.client.post("/drain", json={"timeout_s": 120, "lease_s": 120, "wait_s": 20})
        drained = reply.raise_for_status().json()
        while not drained.get("done"):
            drained = (
                self.client.get(f"/drain/{drained['id']}", params={"wait_s": 20}).raise_for_status().json()
            )
        self.sim.stop()
        self.sim = start_sim(variant, self.scale, self.log_dir)
        self.sim.wait_ready(60)
        self.client.post("/route", json={"upstream": f"http://127.0.0.1:{self.sim.port}"}).raise_for_status()
        self.client.post("/release", json={"id": drained.get("hold_id")}).raise_for_status()
        self.client.post("/serving", json={"variant": variant, "demand": demand_id}).raise_for_status()
        self.switches.append({"to": variant, "seconds": round(time.monotonic() - began, 2)})
        self.variant = variant


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def arm_gateway(
    name: str, variants: tuple[str, ...], opts: argparse.Namespace, log_dir: Path
) -> Iterator[str]:
    """The arm's gateway URL: a live set of `variants`, or (auto) one switched container."""
    scale = str(opts.time_scale)
    if name != "auto switched":
        with simulators(variants, scale, log_dir) as urls:
            spill = SPILL if name == "routed" else "0"
            with gateway(live_env(variants, urls, spill), log_dir) as (url, _):
                yield url
        return
    sim = start_sim(variants[0], scale, log_dir)
    sim.wait_ready(60)
    env = {
        "GATEWAY_UPSTREAM": f"http://127.0.0.1:{sim.port}",
        "GATEWAY_POLICY": "auto",
        "GATEWAY_WORKLOADS": WORKLOADS,
        "GATEWAY_POLICY_WINDOW": AUTO_WINDOW_S,
        "GATEWAY_MIN_RESIDENCY": AUTO_RESIDENCY_S,
    }
    with gateway(env, log_dir) as (url, _pid):
        sock = log_dir / f"gw-{url.rsplit(':', 1)[1]}.sock"
        with Follower(sock, sim, variants[0], scale, log_dir) as follower:
            yield url
            SWITCHES[name] = follower.switches


SWITCHES: dict[str, list] = {}


def run_arm(name: str, variants: tuple[str, ...], opts: argparse.Namespace, log_dir: Path) -> dict:
    with arm_gateway(name, variants, opts, log_dir) as url:
        out: dict[str, GroupResult] = {}

        def group(label: str, streams: int, requests: int, prompt: int, max_tokens: int) -> None:
            out[label] = run_group(url, label, streams, requests, prompt, max_tokens)

        groups = {
            "chat": threading.Thread(target=group, args=("chat", 1, opts.chat_requests, 100, 300)),
            "long": threading.Thread(target=group, args=("long", 16, 16 * opts.long_rounds, 4500, 1000)),
        }
        labels = ("chat", "long") if opts.trace == "mixed" else (opts.trace,)
        for label in labels:
            groups[label].start()
        for label in labels:
            groups[label].join()
    rows = {label: out[label].row() for label in labels}
    if name in SWITCHES:
        rows["switches"] = SWITCHES[name]
    print(f"{name}:" + (f" switches {SWITCHES[name]}" if name in SWITCHES else ""))
    for label in labels:
        row = rows[label]
        print(
            f"  {label:5} goodput {row['goodput_tok_s']:7.1f} tok/s  TTFT p50/p95 {row['ttft_p50_ms']:.0f}/"
            f"{row['ttft_p95_ms']:.0f} ms  TPOT p50/p95 {row['tpot_p50_ms']:.1f}/{row['tpot_p95_ms']:.1f} ms"
            f"  failed {row['failed']}  served {row['served_by']}",
            flush=True,
        )
    return rows


def run_cpu(opts: argparse.Namespace, log_dir: Path) -> dict:
    out = {}
    with simulators(("baseline", "baseline"), "1000", log_dir) as urls:
        setups = {
            "single upstream": {"GATEWAY_UPSTREAM": urls[0]},
            "live set of 1": live_env(("baseline",), urls[:1]),
            "live set of 2": live_env(("baseline", "baseline"), urls),
        }
        for label, env in setups.items():
            with gateway(env, log_dir) as (url, pid):
                run_group(url, "warm", 4, 40, 100, 16)
                before = cpu_seconds(pid)
                result = run_group(url, label, 8, opts.cpu_requests, 100, 16)
                used = cpu_seconds(pid) - before
            row = result.row()
            out[label] = {
                "cpu_ms_per_request": round(used * 1000 / max(1, len(result.samples)), 3),
                "failed": row["failed"],
            }
            print(f"  CPU {label:16} {out[label]['cpu_ms_per_request']:.2f} ms/request", flush=True)
    base = out["single upstream"]["cpu_ms_per_request"]
    for row in out.values():
        row["ratio_to_single"] = round(row["cpu_ms_per_request"] / base, 3) if base else None
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=8.0, help="SIM_TIME_SCALE of the trace")
    parser.add_argument("--chat-requests", type=int, default=40, help="requests of the chat group")
    parser.add_argument("--long-rounds", type=int, default=3, help="rounds of 16 long requests")
    parser.add_argument("--cpu-requests", type=int, default=400, help="requests per CPU measurement")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated arms to run")
    parser.add_argument(
        "--trace", choices=("mixed", "chat", "long"), default="mixed", help="both groups, or one alone"
    )
    parser.add_argument(
        "--no-hybrid",
        dest="hybrid",
        action="store_false",
        help="model a non-hybrid target (MTP not capped at 3 running sequences)",
    )
    parser.add_argument("--json", type=Path, default=RESULTS / "live.json")
    opts = parser.parse_args()
    HYBRID[0] = "1" if opts.hybrid else "0"
    shown = opts.json.resolve()
    shown = shown.relative_to(REPO) if shown.is_relative_to(REPO) else shown
    results: dict = {"settings": vars(opts) | {"json": str(shown)}, "arms": {}}
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
        log_dir = Path(tmp)
        for name in opts.arms.split(","):
            results["arms"][name] = run_arm(name, ARMS[name], opts, log_dir)
        if opts.cpu_requests:
            results["cpu"] = run_cpu(opts, log_dir)
    opts.json.parent.mkdir(parents=True, exist_ok=True)
    tmp_json = opts.json.with_suffix(".tmp")
    tmp_json.write_text(json.dumps(results, indent=2) + "\n")
    tmp_json.replace(opts.json)
    failed = sum(
        row["failed"] for arm in results["arms"].values() for g, row in arm.items() if g != "switches"
    )
    failed += sum(row["failed"] for row in results.get("cpu", {}).values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
