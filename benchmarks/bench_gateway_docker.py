"""Direct to the simulator vs through the gateway in its container, side by side in one run
(`bench_gateway.py` measures the hop itself beside nginx, without Docker).

Three columns: direct, the gateway as shipped (`gateway`: continue_streams on, so it asks
upstream for token ids and records them) and a second gateway with GATEWAY_CONTINUE_STREAMS=false
(`gateway_off`), both in front of the same simulator, their requests interleaved.
Figures: one stream's decode tok/s (ratio to direct), 64 concurrent streams' aggregate tok/s
(ratio), TTFT p50 (added ms), each gateway's CPU time per streamed chunk (its container's cgroup
CPU usage from Docker's stats, before and after; `continue_streams` sets on against off, targets:
decode ratio >= 0.97 with it on, CPU on <= 1.2x off), the shipped gateway's open TCP
connections, idle, before and after N requests on fresh client connections, and its startup:
container process created to the 'gateway on' log line, beside a bare container of the same
image running one line of Python (the container runtime's and the interpreter's share). The
simulator runs at SIM_TIME_SCALE=100 (the 27B profile's 29.4 tok/s becomes 2,940 tok/s per
stream). Needs Docker, vllm-sim:latest (`make image-sim`) and the gateway image (built here
when missing or stale, under $GATEWAY_IMAGE or the toolkit's version; --image with --no-build
measures an existing one).

The gateway container gets the CPU weight the rendered compose file gives it. --placement
says which CPUs each process gets (a host of 2+ CPUs; other host processes are not pinned, and
the load average at the end says how busy it was):
  own-core (default)  the gateway alone on the last CPU; the simulator and this process, the
                      load client, on the others. As on a GPU host, where the proxy's CPU is
                      not the one the backend's server needs.
  shared-core         the client on CPU 0; the simulator and the gateway together on the
                      others: at 64 streams both are CPU-bound on one core, so the ratio shows
                      how that core is shared more than what the proxy costs.
  kernel              nothing pinned.

Usage: .venv/bin/python benchmarks/bench_gateway_docker.py [--requests N] [--json PATH]
           [--image TAG --no-build] [--placement own-core|shared-core|kernel]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import docker
import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from composer.render.gateway import CPU_SHARES  # noqa: E402
from tests.gateway import dockerlab  # noqa: E402
from tests.gateway.dockerlab import KEY, Lab, build_gateway_image, chat_body, host_port  # noqa: E402

HEADERS = {"Authorization": f"Bearer {KEY}"}
T = TypeVar("T")


async def one_stream(client: httpx.AsyncClient, url: str, max_tokens: int) -> tuple[float, float, int]:
    """(ttft s, decode seconds from first to last content chunk, content chunks)."""
    started = time.perf_counter()
    first = last = 0.0
    chunks = 0
    async with client.stream(
        "POST", url + "/v1/chat/completions", json=chat_body(max_tokens), headers=HEADERS
    ) as r:
        assert r.status_code == 200, r.status_code
        buf = b""
        async for data in r.aiter_raw():
            now = time.perf_counter()
            buf += data
            *events, buf = buf.split(b"\n\n")
            for ev in events:
                if ev.startswith(b"data: {") and b'"content"' in ev:
                    chunks += 1
                    if not first:
                        first = now
                    last = now
    return first - started, last - first, chunks


async def decode_rate(url: str, runs: int, max_tokens: int) -> float:
    rates = []
    async with httpx.AsyncClient(timeout=60) as client:
        for _ in range(runs):
            _, decode, chunks = await one_stream(client, url, max_tokens)
            rates.append((chunks - 1) / decode)
    return statistics.median(rates)


async def aggregate_rate(url: str, streams: int, max_tokens: int) -> tuple[float, float]:
    """(content chunks per second over all streams, wall seconds)."""
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        started = time.perf_counter()
        results = await asyncio.gather(*(one_stream(client, url, max_tokens) for _ in range(streams)))
        wall = time.perf_counter() - started
    return sum(c for _, _, c in results) / wall, wall


async def ttft_p50(urls: list[str], requests: int) -> list[float]:
    """TTFT p50 of each URL, their requests interleaved (both see the same host load) in a
    random order with a random pause (a fixed rhythm can lock onto the simulator's steps)."""
    values: list[list[float]] = [[] for _ in urls]
    rng = random.Random(0)
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(requests):
            for i in rng.sample(range(len(urls)), len(urls)):
                await asyncio.sleep(rng.uniform(0.0, 0.05))
                ttft, _, _ = await one_stream(client, urls[i], 2)
                values[i].append(ttft)
    return [statistics.median(v) for v in values]


async def churn(url: str, requests: int, concurrency: int = 16) -> int:
    """`requests` small requests, each on a fresh client connection; returns failures."""
    failures = 0
    body = {**chat_body(1), "stream": False}
    sem = asyncio.Semaphore(concurrency)
    no_reuse = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=30, limits=no_reuse) as client:

        async def one() -> None:
            nonlocal failures
            async with sem:
                r = await client.post(url + "/v1/chat/completions", json=body, headers=HEADERS)
            failures += r.status_code != 200

        await asyncio.gather(*(one() for _ in range(requests)))
    return failures


def established(container) -> int:
    """ESTABLISHED TCP sockets inside a container (from /proc/net/tcp and tcp6)."""
    out = container.exec_run(["cat", "/proc/net/tcp", "/proc/net/tcp6"]).output.decode()
    return sum(1 for line in out.splitlines()[1:] if len(line.split()) > 3 and line.split()[3] == "01")


def cpu_seconds(container) -> float:
    """CPU seconds the container's cgroup used so far (every process in it), from Docker's stats."""
    return container.stats(stream=False, one_shot=True)["cpu_stats"]["cpu_usage"]["total_usage"] / 1e9


# The wall-clock time at which PID 1 of the container was created (before the container
# runtime's setup and the exec), read inside the container.
CREATED_AT = (
    "import os, time;"
    "ticks = int(open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19]);"
    "up = float(open('/proc/uptime').read().split()[0]);"
    "created = time.time() - (up - ticks / os.sysconf('SC_CLK_TCK'))"
)
STARTS = 3


def gateway_startup_s(client) -> float:
    """A fresh gateway container: its process created to its 'gateway on' log line."""
    lab = Lab(client).start()
    try:
        lab.wait_gateway()
        created = lab.gateway.exec_run(["python3", "-c", CREATED_AT + ";print(created)"]).output
        line = next(x for x in lab.gateway.logs().decode().splitlines() if "gateway on" in x)
        return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp() - float(created)
    finally:
        lab.cleanup()


def bare_startup_s(client, image: str) -> float:
    """A container of the same image running one line of Python: created to that line."""
    out = client.containers.run(
        image,
        entrypoint=["python3", "-c", CREATED_AT + ";print(time.time() - created)"],
        remove=True,
        network_mode="none",
    )
    return float(out)


def wait_models(url: str, timeout: float = 30) -> None:
    """Wait until `url` lists the models (the gateway's upstream answers through it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/v1/models", headers=HEADERS, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)


def with_cpu(container, work: Callable[[], T]) -> tuple[T, float]:
    """work()'s result and the CPU seconds `container` used meanwhile (0 for None)."""
    before = cpu_seconds(container) if container is not None else 0.0
    result = work()
    return result, cpu_seconds(container) - before if container is not None else 0.0


def columns(values: dict[str, float], ratio: bool) -> dict[str, float]:
    """The three columns (direct, gateway, gateway_off) rounded, with each gateway's ratio to
    direct (`ratio`) or the difference (`added`, `added_off`)."""
    d = values["direct"]
    out = {name: round(v, 2) for name, v in values.items()}
    for name, suffix in (("gateway", ""), ("gateway_off", "_off")):
        if ratio:
            out["ratio" + suffix] = round(values[name] / d, 3)
        else:
            out["added" + suffix] = round(values[name] - d, 2)
    return out


PLACEMENTS = ("own-core", "shared-core", "kernel")
# Connections are counted after this long without requests: past the keep-alive timeouts of
# clients' connections (uvicorn's 5 s) and of idle upstream ones (at most twice 4 s).
IDLE_S = 10


def placement_cpus(placement: str, cpus: list[int]) -> tuple[set[int], str, str]:
    """(client CPUs, simulator cpuset, gateway cpuset) for a placement; empty means unpinned."""
    if placement == "own-core":
        rest = cpus[:-1]
        return set(rest), ",".join(map(str, rest)), str(cpus[-1])
    if placement == "shared-core":
        servers = ",".join(map(str, cpus[1:]))
        return {cpus[0]}, servers, servers
    return set(), "", ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000, help="requests for the connection count")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--image", default=dockerlab.GATEWAY_IMAGE, help="gateway image tag")
    parser.add_argument("--no-build", action="store_true", help="measure --image as it is")
    parser.add_argument(
        "--placement", choices=PLACEMENTS, default="own-core", help="which CPUs each process gets"
    )
    args = parser.parse_args()
    client = docker.from_env(timeout=120)
    dockerlab.GATEWAY_IMAGE = args.image
    if not args.no_build:
        build_gateway_image()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        args.placement = "kernel"
    client_cpus, sim_cpus, gateway_cpus = placement_cpus(args.placement, cpus)
    startups = [(gateway_startup_s(client), bare_startup_s(client, args.image)) for _ in range(STARTS)]
    started_gateway = statistics.median(g for g, _ in startups)
    started_bare = statistics.median(b for _, b in startups)
    lab = Lab(client).start()
    off = Lab(client).start({"GATEWAY_CONTINUE_STREAMS": "false"})
    try:
        sim = lab.start_sim("bench", publish=host_port(18350))
        off.network.connect(sim, aliases=["vllm"])
        gateways = {"gateway": lab.gateway, "gateway_off": off.gateway}
        for container in gateways.values():
            container.update(cpu_shares=CPU_SHARES, **({"cpuset_cpus": gateway_cpus} if gateway_cpus else {}))
        if sim_cpus:
            sim.update(cpuset_cpus=sim_cpus)
        if client_cpus:
            os.sched_setaffinity(0, client_cpus)
        sim.reload()
        direct = f"http://127.0.0.1:{sim.attrs['NetworkSettings']['Ports']['8000/tcp'][0]['HostPort']}"
        urls = {"direct": direct, "gateway": lab.url, "gateway_off": off.url}
        for gateway_lab in (lab, off):
            gateway_lab.wait_gateway()
            wait_models(gateway_lab.url)
        for url in urls.values():
            asyncio.run(decode_rate(url, 2, 200))  # warm every path
        decode: dict[str, list[float]] = {name: [] for name in urls}
        cpu: dict[str, float] = {}
        for _ in range(2):  # the columns interleaved, twice
            for name, url in urls.items():
                rate, used = with_cpu(
                    gateways.get(name), lambda url=url: asyncio.run(decode_rate(url, 5, 1000))
                )
                decode[name].append(rate)
                cpu[name] = cpu.get(name, 0.0) + used
        # 10 streams of 1000 tokens (one chunk per token) went through each gateway
        cpu_us_per_chunk = {name: cpu[name] / 10_000 * 1e6 for name in gateways}
        aggregate: dict[str, list[float]] = {name: [] for name in urls}
        busy: dict[str, float] = {}
        for _ in range(2):
            for name, url in urls.items():
                (rate, wall), used = with_cpu(
                    gateways.get(name), lambda url=url: asyncio.run(aggregate_rate(url, 64, 300))
                )
                aggregate[name].append(rate)
                busy.setdefault(name, used / wall)  # the first round's
        ttft = dict(zip(urls, asyncio.run(ttft_p50(list(urls.values()), 150)), strict=True))
        time.sleep(IDLE_S)
        idle = established(lab.gateway)
        failures = asyncio.run(churn(lab.url, args.requests))
        time.sleep(IDLE_S)
        after = established(lab.gateway)
        rss = next(
            int(x.split()[1])
            for x in lab.gateway.exec_run(["cat", "/proc/1/status"]).output.decode().splitlines()
            if x.startswith("VmRSS")
        )
        ttft_ms = columns({name: t * 1000 for name, t in ttft.items()}, ratio=False)
        single = columns({name: statistics.mean(v) for name, v in decode.items()}, ratio=True)
        report = {
            "single_stream_tok_s": single,
            "aggregate_64_tok_s": {
                **columns({k: statistics.mean(v) for k, v in aggregate.items()}, ratio=True),
                "gateway_cpu_cores_busy": round(busy["gateway"], 2),
                "gateway_off_cpu_cores_busy": round(busy["gateway_off"], 2),
            },
            "ttft_p50_ms": ttft_ms,
            "continue_streams": {
                "decode_ratio_to_direct": {
                    "on": single["ratio"],
                    "off": single["ratio_off"],
                    "target_on": ">= 0.97",
                },
                "cpu_us_per_chunk": {
                    "on": round(cpu_us_per_chunk["gateway"], 1),
                    "off": round(cpu_us_per_chunk["gateway_off"], 1),
                    "on_over_off": round(cpu_us_per_chunk["gateway"] / cpu_us_per_chunk["gateway_off"], 3),
                    "target": "<= 1.2",
                },
                "ttft_added_ms": {"on": ttft_ms["added"], "off": ttft_ms["added_off"]},
            },
            "connections": {
                "requests": args.requests,
                "failed": failures,
                "gateway_established_before": idle,
                "gateway_established_after": after,
            },
            "startup_s": {
                "runs": STARTS,
                "bare_container": round(started_bare, 3),
                "gateway": round(started_gateway, 3),
                "added": round(started_gateway - started_bare, 3),
            },
            "gateway_image": args.image,
            "placement": {
                "name": args.placement,
                "client_cpus": sorted(client_cpus) if client_cpus else "any",
                "simulator_cpus": sim_cpus or "any",
                "gateway_cpus": gateway_cpus or "any",
                "gateway_cpu_shares": CPU_SHARES,
            },
            "gateway_rss_mib": round(rss / 1024, 1),
            "gateway_cpu_us_per_chunk": round(cpu_us_per_chunk["gateway"], 1),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count(),
        }
    finally:
        lab.cleanup()  # the simulator first: it is on both networks
        off.cleanup()
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
