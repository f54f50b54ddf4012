"""Direct to the simulator vs through the gateway, side by side in one run.

Figures: one stream's decode tok/s (ratio gateway/direct), 64 concurrent streams' aggregate
tok/s (ratio), TTFT p50 (added ms), the gateway's open TCP connections, idle, before and
after N requests on fresh client connections, and its startup: container process created to
the 'gateway on' log line, beside a bare container of the same image running one line of
Python (the container runtime's and the interpreter's share). The simulator runs at SIM_TIME_SCALE=100 (the 27B
profile's 29.4 tok/s becomes 2,940 tok/s per stream). Needs Docker, vllm-sim:latest
(`make image-sim`) and the gateway image (built here when missing or stale, under
$GATEWAY_IMAGE or the toolkit's version; --image with --no-build measures an existing one).

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

Usage: .venv/bin/python benchmarks/bench_gateway.py [--requests N] [--json PATH]
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
from datetime import datetime
from pathlib import Path

import docker
import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from composer.render.gateway import CPU_SHARES  # noqa: E402
from tests.gateway import dockerlab  # noqa: E402
from tests.gateway.dockerlab import KEY, Lab, build_gateway_image, chat_body, host_port  # noqa: E402

HEADERS = {"Authorization": f"Bearer {KEY}"}


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
    """User + system CPU seconds of the container's main process."""
    probe = "import os; f=open('/proc/1/stat').read().rsplit(')',1)[1].split(); print((int(f[11])+int(f[12]))/os.sysconf('SC_CLK_TCK'))"
    return float(container.exec_run(["python3", "-c", probe]).output.decode())


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
    try:
        sim = lab.start_sim("bench", publish=host_port(18350))
        lab.gateway.update(cpu_shares=CPU_SHARES, **({"cpuset_cpus": gateway_cpus} if gateway_cpus else {}))
        if sim_cpus:
            sim.update(cpuset_cpus=sim_cpus)
        if client_cpus:
            os.sched_setaffinity(0, client_cpus)
        sim.reload()
        direct = f"http://127.0.0.1:{sim.attrs['NetworkSettings']['Ports']['8000/tcp'][0]['HostPort']}"
        gateway = lab.url
        lab.wait_gateway()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(gateway + "/v1/models", headers=HEADERS, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        asyncio.run(decode_rate(gateway, 2, 200))  # warm both paths
        asyncio.run(decode_rate(direct, 2, 200))
        figures: dict[str, float] = {}
        cpu_before = cpu_seconds(lab.gateway)
        for name, url in (
            ("direct", direct),
            ("gateway", gateway),
            ("direct2", direct),
            ("gateway2", gateway),
        ):
            figures[f"decode_{name}"] = asyncio.run(decode_rate(url, 5, 1000))
        # 10 gateway streams of 1000 tokens (one chunk per token) ran in the two gateway rounds
        cpu_us_per_chunk = (cpu_seconds(lab.gateway) - cpu_before) / 10_000 * 1e6
        d1 = statistics.mean([figures["decode_direct"], figures["decode_direct2"]])
        g1 = statistics.mean([figures["decode_gateway"], figures["decode_gateway2"]])
        agg_d, _ = asyncio.run(aggregate_rate(direct, 64, 300))
        cpu_before = cpu_seconds(lab.gateway)
        agg_g, wall_g = asyncio.run(aggregate_rate(gateway, 64, 300))
        gateway_busy = (cpu_seconds(lab.gateway) - cpu_before) / wall_g
        agg_d2, _ = asyncio.run(aggregate_rate(direct, 64, 300))
        agg_g2, _ = asyncio.run(aggregate_rate(gateway, 64, 300))
        t_d, t_g = asyncio.run(ttft_p50([direct, gateway], 150))
        time.sleep(IDLE_S)
        idle = established(lab.gateway)
        failures = asyncio.run(churn(gateway, args.requests))
        time.sleep(IDLE_S)
        after = established(lab.gateway)
        rss = next(
            int(x.split()[1])
            for x in lab.gateway.exec_run(["cat", "/proc/1/status"]).output.decode().splitlines()
            if x.startswith("VmRSS")
        )
        report = {
            "single_stream_tok_s": {
                "direct": round(d1, 1),
                "gateway": round(g1, 1),
                "ratio": round(g1 / d1, 3),
            },
            "aggregate_64_tok_s": {
                "direct": round((agg_d + agg_d2) / 2, 1),
                "gateway": round((agg_g + agg_g2) / 2, 1),
                "ratio": round((agg_g + agg_g2) / (agg_d + agg_d2), 3),
                "gateway_cpu_cores_busy": round(gateway_busy, 2),
            },
            "ttft_p50_ms": {
                "direct": round(t_d * 1000, 2),
                "gateway": round(t_g * 1000, 2),
                "added": round((t_g - t_d) * 1000, 2),
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
            "gateway_cpu_us_per_chunk": round(cpu_us_per_chunk, 1),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count(),
        }
    finally:
        lab.cleanup()
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
