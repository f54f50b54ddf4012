"""The gateway's hop beside nginx's: direct, nginx, the gateway with `continue_streams` on and
off, every column in front of the same upstream in one run, their requests interleaved.

The upstream is a small SSE server in its own process (aiohttp on uvloop, vLLM's shapes: a
chat completion, or a stream whose events carry `token_ids` when asked, a chunk every
`--pace-ms`, then `[DONE]`). nginx is Debian's (`apt-get install nginx-light`; `make tools`),
one worker, upstream keep-alive, `proxy_buffering off`: the floor. Each gateway is
`python3 -m composer.gateway` as its container runs it. Everything runs on this host, on
loopback; nothing is pinned (the load average at the end says how busy the host was).

Figures, by column (each proxy's CPU is its processes' user+system time from /proc):
- small requests (non-streamed chat completions, one client, keep-alive): added latency p50
  and p99 against direct, the proxy's CPU per request;
- streams (a chunk every `--pace-ms`): added time to the first byte (p50), the proxy's CPU per
  streamed chunk;
- throughput of 1 and 64 concurrent streams (chunks sent as fast as the upstream can), as a
  ratio to direct;
- responses that ended early (a closed connection, a missing `[DONE]`): must be 0;
- ratios of each gateway to nginx, with the targets.

With `--soak` it runs the soak instead (`gateway_soak.py` has its upstream and client): for
direct, nginx and the gateway (`continue_streams` on; `--only gateway_off` adds it off),
`--soak-streams` streams at once for `--soak-seconds`, a chunk every `--soak-pace-ms` each (one
upstream ticker writes every open stream's next chunk at once, as an engine step does), read by
a client in its own process: chunks sent against received per stream (lost), the gaps between
a stream's chunks (p50, p99, max, how many longer than 10x the pacing), each stream's span and
first chunk, streams that ended early, the proxy's CPU per chunk and its memory (VmRSS of its
processes) before and while the streams are held. Then the switch, on a fresh gateway: held
over its control socket, `--switch-streams` streams sent and held, the route moved to a second
upstream, the hold released: how many were answered (200), by which upstream, errors, and the
time from the release to each stream's first chunk. The soft limit of open files is raised to
the hard one (each stream is a descriptor in the client and two in a proxy). Figures only: no
target is asserted (the load average before and after each column is in the JSON).

Usage: .venv/bin/python benchmarks/bench_gateway.py [--rounds N] [--requests N] [--streams N]
           [--chunks N] [--pace-ms MS] [--json PATH] [--only NAME,...]
       .venv/bin/python benchmarks/bench_gateway.py --soak [--soak-streams N] [--soak-seconds S]
           [--soak-pace-ms MS] [--switch-streams N] [--json PATH] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks import gateway_soak  # noqa: E402 (the repository on the path first)

TICK = os.sysconf("SC_CLK_TCK")
MODEL = "bench-model"
NGINX_CONF = """worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/nginx.err warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  upstream backend {{ server 127.0.0.1:{upstream}; keepalive 128; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;
    }}
  }}
}}
"""
CLIENT_KEEPALIVE_S = 4.0
TARGETS = {
    "added_p50_over_nginx": 2.0,
    "added_ttfb_over_nginx": 2.0,
    "cpu_per_chunk_over_nginx": 1.3,
    "single_stream_over_direct": 0.99,
}


# ---------------------------------------------------------------- the upstream (own process)


def serve_upstream(port: int) -> None:
    """A fast vLLM-shaped upstream: /health, /v1/models, chat completions (streamed or not)."""
    from aiohttp import web

    async def health(_: web.Request) -> web.Response:
        return web.Response()

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            answer = {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": MODEL,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            }
            return web.json_response(answer)
        ids = body.get("return_token_ids") is True
        pace = float(body.get("bench_pace_ms", 0)) / 1000
        chunks = int(body.get("max_tokens", 16))
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL}

        def event(delta: dict[str, str], finish: str | None = None, **extra: Any) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            if "token_ids" in extra:
                choice["token_ids"] = extra.pop("token_ids")
            data = {**head, "choices": [choice], **extra}
            return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"

        first = {"prompt_token_ids": [1, 2, 3]} if ids else {}
        await response.write(event({"role": "assistant", "content": ""}, **first))
        for i in range(chunks):
            if pace:
                await asyncio.sleep(pace)
            await response.write(event({"content": f" t{i}"}, **({"token_ids": [100 + i]} if ids else {})))
        await response.write(event({}, "length") + b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# ---------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pids: list[int]) -> float:
    """User+system CPU seconds of `pids` (and their children that were reaped)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / TICK


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1])
    return 0


def wait_http(url: str, timeout: float = 30.0) -> None:
    async def probe() -> None:
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                try:
                    async with session.get(url) as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise SystemExit(f"bench: {url} did not answer within {timeout:g}s")

    asyncio.run(probe())


class Column:
    """One way to reach the upstream: its URL and the processes whose CPU it costs."""

    def __init__(self, name: str, url: str, procs: list[subprocess.Popen[bytes]], pids: list[int]) -> None:
        self.name, self.url, self.procs, self.pids = name, url, procs, pids

    def cpu(self) -> float:
        return cpu_seconds(self.pids) if self.pids else 0.0


def wait_started(proc: subprocess.Popen[bytes], url: str, log: Path | None = None) -> None:
    """Wait for `url`; a server that does not answer is stopped (the end of its log shown)."""
    try:
        wait_http(url)
    except SystemExit:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if log is not None:
            sys.stderr.write(log.read_bytes()[-3000:].decode(errors="replace"))
        raise


def start_upstream(port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(port)], start_new_session=True)


def start_nginx(workdir: Path, upstream: int) -> Column:
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        raise SystemExit("bench: nginx is not installed (make tools, or apt-get install nginx-light)")
    port = free_port()
    conf = workdir / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=workdir, upstream=upstream, port=port))
    proc = subprocess.Popen(
        [binary, "-c", str(conf), "-p", str(workdir), "-g", "daemon off;"], start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    wait_started(proc, url + "/health")
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return Column("nginx", url, [proc], [proc.pid, *map(int, children)])


def start_gateway(
    name: str, workdir: Path, upstream: int, extra: dict[str, str], source: Path = REPO
) -> Column:
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_") and k != "VLLM_API_KEY"},
        "GATEWAY_UPSTREAM": f"http://127.0.0.1:{upstream}",
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": str(port),
        "GATEWAY_SERVED_NAME": MODEL,
        "GATEWAY_CONTROL_SOCKET": str(workdir / f"{name}.sock"),
        "GATEWAY_LOG_LEVEL": "warning",
        "PYTHONPATH": str(source),
        **extra,
    }
    log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(
        [sys.executable, "-m", "composer.gateway"],
        env=env,
        stdout=log,
        stderr=log,
        cwd=workdir,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    wait_started(proc, url + "/v1/models", workdir / f"{name}.log")
    return Column(name, url, [proc], [proc.pid])


# ---------------------------------------------------------------- the client


class Ended(Exception):
    """A response ended before its end (connection closed, or a stream without [DONE])."""


def chat(stream: bool, chunks: int = 1, pace_ms: float = 0.0) -> bytes:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": chunks,
        "temperature": 0,
    }
    if stream:
        body.update(stream=True, bench_pace_ms=pace_ms)
    return json.dumps(body).encode()


HEADERS = {"content-type": "application/json"}


async def small(session: aiohttp.ClientSession, url: str, body: bytes) -> float:
    started = time.perf_counter()
    async with session.post(url + "/v1/chat/completions", data=body, headers=HEADERS) as r:
        data = await r.read()
    if r.status != 200 or not data.endswith(b"}"):
        raise Ended(f"{url}: {r.status} {data[:80]!r}")
    return time.perf_counter() - started


async def stream(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[float, float, int]:
    """(time to the first byte, total seconds, content events)."""
    started = time.perf_counter()
    first = 0.0
    events = 0
    tail = b""
    try:
        async with session.post(url + "/v1/chat/completions", data=body, headers=HEADERS) as r:
            if r.status != 200:
                raise Ended(f"{url}: status {r.status}")
            async for data in r.content.iter_any():
                if not first:
                    first = time.perf_counter() - started
                events += data.count(b'"content"')
                tail = (tail + data)[-32:]
    except aiohttp.ClientPayloadError as err:
        raise Ended(f"{url}: {err}") from None
    if not tail.endswith(b"data: [DONE]\n\n"):
        raise Ended(f"{url}: the stream ended without [DONE]: {tail!r}")
    return first, time.perf_counter() - started, events


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(columns: list[Column], args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(0)
    names = [c.name for c in columns]
    latency: dict[str, list[float]] = {n: [] for n in names}
    ttfb: dict[str, list[float]] = {n: [] for n in names}
    cpu_small = dict.fromkeys(names, 0.0)
    cpu_stream = dict.fromkeys(names, 0.0)
    chunks_seen = dict.fromkeys(names, 0)
    single: dict[str, list[float]] = {n: [] for n in names}
    wide: dict[str, list[float]] = {n: [] for n in names}
    ended: dict[str, list[str]] = {n: [] for n in names}
    small_body = chat(False)
    paced = chat(True, args.chunks, args.pace_ms)
    fast = chat(True, args.fast_chunks)
    batch = 50

    async def guarded(name: str, work: Awaitable[Any]) -> Any:
        try:
            return await work
        except (Ended, aiohttp.ClientError) as err:
            ended[name].append(str(err))
            return None

    # idle connections are let go before any proxy's keep-alive timeout (the gateway's 5 s):
    # a client that keeps them longer may send on one the proxy is closing just then
    sessions = {
        c.name: aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=CLIENT_KEEPALIVE_S),
            timeout=aiohttp.ClientTimeout(total=120),
        )
        for c in columns
    }
    try:
        for c in columns:  # warm every path
            for _ in range(20):
                await guarded(c.name, small(sessions[c.name], c.url, small_body))
            await guarded(c.name, stream(sessions[c.name], c.url, chat(True, 20)))
        for round_ in range(args.rounds):
            # small requests, in batches, the columns interleaved in a random order
            for _ in range(args.requests // batch):
                for c in rng.sample(columns, len(columns)):
                    before = c.cpu()
                    for _ in range(batch):
                        took = await guarded(c.name, small(sessions[c.name], c.url, small_body))
                        if took is not None:
                            latency[c.name].append(took)
                    cpu_small[c.name] += c.cpu() - before
            # paced streams: time to first byte and CPU per chunk
            for _ in range(args.streams):
                for c in rng.sample(columns, len(columns)):
                    before = c.cpu()
                    got = await guarded(c.name, stream(sessions[c.name], c.url, paced))
                    cpu_stream[c.name] += c.cpu() - before
                    if got is not None:
                        ttfb[c.name].append(got[0])
                        chunks_seen[c.name] += got[2]
            # throughput: 1 stream, then 64 at once, chunks as fast as the upstream sends
            for c in rng.sample(columns, len(columns)):
                got = await guarded(c.name, stream(sessions[c.name], c.url, fast))
                if got is not None:
                    single[c.name].append(got[2] / got[1])
                started = time.perf_counter()
                results = await asyncio.gather(
                    *(guarded(c.name, stream(sessions[c.name], c.url, fast)) for _ in range(args.concurrency))
                )
                wall = time.perf_counter() - started
                wide[c.name].append(sum(r[2] for r in results if r is not None) / wall)
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        for session in sessions.values():
            await session.close()
    direct = "direct"
    requests = {n: len(latency[n]) for n in names}
    out: dict[str, Any] = {}
    for n in names:
        row: dict[str, Any] = {
            "latency_p50_us": round(pct(latency[n], 0.5) * 1e6),
            "latency_p99_us": round(pct(latency[n], 0.99) * 1e6),
            "ttfb_p50_us": round(statistics.median(ttfb[n]) * 1e6) if ttfb[n] else None,
            "single_stream_chunks_s": round(statistics.mean(single[n])) if single[n] else None,
            f"concurrent_{args.concurrency}_chunks_s": round(statistics.mean(wide[n])) if wide[n] else None,
            "ended_early": len(ended[n]),
        }
        if n != direct:
            row["added_p50_us"] = row["latency_p50_us"] - out[direct]["latency_p50_us"]
            row["added_p99_us"] = row["latency_p99_us"] - out[direct]["latency_p99_us"]
            row["added_ttfb_us"] = row["ttfb_p50_us"] - out[direct]["ttfb_p50_us"]
            row["cpu_per_request_us"] = round(cpu_small[n] / max(1, requests[n]) * 1e6)
            row["cpu_per_chunk_us"] = round(cpu_stream[n] / max(1, chunks_seen[n]) * 1e6, 1)
            row["single_stream_over_direct"] = round(
                row["single_stream_chunks_s"] / out[direct]["single_stream_chunks_s"], 3
            )
            key = f"concurrent_{args.concurrency}_chunks_s"
            row[f"concurrent_{args.concurrency}_over_direct"] = round(row[key] / out[direct][key], 3)
        if ended[n]:
            row["ended_early_examples"] = ended[n][:3]
        out[n] = row
    if "nginx" in out:
        floor = out["nginx"]
        for n in names:
            if n.startswith("gateway"):
                row = out[n]
                row["over_nginx"] = {
                    "added_p50": round(row["added_p50_us"] / max(1, floor["added_p50_us"]), 2),
                    "added_p99": round(row["added_p99_us"] / max(1, floor["added_p99_us"]), 2),
                    "cpu_per_request": round(
                        row["cpu_per_request_us"] / max(1, floor["cpu_per_request_us"]), 2
                    ),
                    "added_ttfb": round(row["added_ttfb_us"] / max(1, floor["added_ttfb_us"]), 2),
                    "cpu_per_chunk": round(row["cpu_per_chunk_us"] / max(0.1, floor["cpu_per_chunk_us"]), 2),
                }
    return out


def table(columns: dict[str, Any], concurrency: int) -> str:
    keys = [
        ("added p50 us", "added_p50_us"),
        ("added p99 us", "added_p99_us"),
        ("CPU/request us", "cpu_per_request_us"),
        ("added TTFB us", "added_ttfb_us"),
        ("CPU/chunk us", "cpu_per_chunk_us"),
        ("1 stream / direct", "single_stream_over_direct"),
        (f"{concurrency} streams / direct", f"concurrent_{concurrency}_over_direct"),
        ("ended early", "ended_early"),
    ]
    names = [n for n in columns if n != "direct"]
    lines = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, key in keys:
        lines.append(f"| {label} | " + " | ".join(str(columns[n].get(key)) for n in names) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------- the soak


def raise_open_files() -> tuple[int, int]:
    """The soft limit of open files raised to the hard one (children inherit it): (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def start_soak_upstream(port: int, name: str, pace_ms: float) -> subprocess.Popen[bytes]:
    spec = f"{port}:{name}:{pace_ms}"
    return subprocess.Popen([sys.executable, __file__, "--soak-upstream", spec], start_new_session=True)


def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as reply:
        return json.loads(reply.read())


def rss_mib(column: Column) -> float | None:
    """VmRSS of the column's processes together (None: no proxy)."""
    return round(sum(rss_kib(p) for p in column.pids) / 1024, 1) if column.pids else None


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class SoakClient:
    """The soak's client in its own process; its stdout's lines are read on a thread."""

    def __init__(
        self, url: str, prefix: str, streams: int, chunks: int, args: argparse.Namespace, workdir: Path
    ) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.out = workdir / f"client-{prefix}.json"
        spec = {
            "host": host,
            "port": int(port),
            "streams": streams,
            "chunks": chunks,
            "pace_ms": args.soak_pace_ms,
            "ramp_s": args.soak_ramp_s,
            "prefix": prefix,
            "out": str(self.out),
            "timeout_s": round(4 * chunks * args.soak_pace_ms / 1000 + 120),
        }
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--soak-client", json.dumps(spec)], stdout=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.opened = 0.0  # monotonic time every stream had its first chunk
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.lines.put(line)

    def poll(self) -> dict[str, Any] | None:
        """The client's result once it has ended (None while it runs)."""
        while not self.lines.empty():
            line = self.lines.get()
            if line.startswith("open "):
                self.opened = float(line.split()[1])
        if self.proc.poll() is None:
            return None
        if self.proc.returncode != 0 or not self.out.exists():
            raise SystemExit(f"bench: the soak client exited {self.proc.returncode} without a result")
        return json.loads(self.out.read_text())


def soak_column(
    column: Column, upstream: subprocess.Popen[bytes], port: int, args: argparse.Namespace, workdir: Path
) -> dict:
    """`--soak-streams` paced streams at once through `column` for `--soak-seconds`."""
    chunks = round(args.soak_seconds * 1000 / args.soak_pace_ms)
    stats_url = f"http://127.0.0.1:{port}/bench/stats"
    get_json(stats_url)  # reset the upstream's counts
    rss_before = rss_mib(column)
    cpu_before, upstream_before, load_before = column.cpu(), cpu_seconds([upstream.pid]), load()
    started = time.monotonic()
    client = SoakClient(column.url, column.name, args.soak_streams, chunks, args, workdir)
    held: list[float] = []
    while (result := client.poll()) is None:
        time.sleep(0.5)
        if client.opened and (rss := rss_mib(column)) is not None:
            held.append(rss)
    wall = time.monotonic() - started
    cpu, upstream_cpu = column.cpu() - cpu_before, cpu_seconds([upstream.pid]) - upstream_before
    stats = get_json(stats_url)
    streams = result["streams"]
    received = {n: s["received"] for n, s in streams.items()}
    ended = {n: s["ended_early"] for n, s in streams.items() if s["ended_early"]}
    firsts = sorted(s["first_after_s"] for s in streams.values() if s["first_after_s"] is not None)
    spans = sorted(s["span_s"] for s in streams.values() if s["received"] == chunks)
    row: dict[str, Any] = {
        **gateway_soak.account(stats["sent"], received, ended, chunks),
        **result["gaps"],
        "chunks_per_stream": chunks,
        "first_chunk_p50_ms": round(gateway_soak.percentile(firsts, 0.5) * 1e3, 1) if firsts else None,
        "first_chunk_max_ms": round(firsts[-1] * 1e3, 1) if firsts else None,
        "span_expected_s": round((chunks - 1) * args.soak_pace_ms / 1000, 2),
        "span_p50_s": round(gateway_soak.percentile(spans, 0.5), 2) if spans else None,
        "span_max_s": round(spans[-1], 2) if spans else None,
        "seconds": round(wall, 1),
        "all_open_after_s": round(client.opened - started, 2) if client.opened else None,
        "chunks_per_s": round(sum(received.values()) / wall),
        "proxy_cpu_s": round(cpu, 2),
        "proxy_cpu_per_chunk_us": round(cpu / max(1, sum(received.values())) * 1e6, 1)
        if column.pids
        else None,
        "proxy_cpu_cores": round(cpu / wall, 2),
        "upstream_cpu_cores": round(upstream_cpu / wall, 2),
        "client_cpu_cores": round(result["client_cpu_s"] / wall, 2),
        "upstream_ticks": stats["ticks"],
        "rss_before_mib": rss_before,
        "rss_held_median_mib": round(statistics.median(held), 1) if held else None,
        "rss_held_peak_mib": max(held) if held else None,
        "rss_after_mib": rss_mib(column),
        "load_before": load_before,
        "load_after": load(),
    }
    if held and rss_before is not None:
        row["kib_per_held_stream"] = round(
            (statistics.median(held) - rss_before) * 1024 / args.soak_streams, 1
        )
        row["kib_per_held_stream_peak"] = round((max(held) - rss_before) * 1024 / args.soak_streams, 1)
    if ended:
        row["ended_early_examples"] = sorted(set(ended.values()))[:3]
    return row


def soak_switch(gateway: Column, workdir: Path, ports: tuple[int, int], args: argparse.Namespace) -> dict:
    """`--switch-streams` streams held by a control hold, the route moved to the second
    upstream, the hold released: who answered, and how soon after the release."""
    from composer.gateway.ctl import call

    sock = str(workdir / f"{gateway.name}.sock")
    n, chunks = args.switch_streams, args.switch_chunks
    old, new = (f"http://127.0.0.1:{p}" for p in ports)
    stats_url = f"http://127.0.0.1:{ports[1]}/bench/stats"
    get_json(stats_url)
    rss_before = rss_mib(gateway)
    code, hold = call(sock, "POST", "/hold", {"lease_s": 600, "owner": "bench-soak"})
    if code != 200:
        raise SystemExit(f"bench: the hold was refused: {hold}")
    client = SoakClient(gateway.url, "switch", n, chunks, args, workdir)
    started = time.monotonic()
    held = 0
    while held < n and client.proc.poll() is None and time.monotonic() - started < 120:
        time.sleep(0.2)
        held = call(sock, "GET", "/state", None)[1]["held"]
    all_held_s = time.monotonic() - started
    rss_held = rss_mib(gateway)
    routed = call(sock, "POST", "/upstreams", {"single": {"url": new, "variant": "b"}})
    released_at = time.monotonic()
    released = call(sock, "POST", "/release", {"id": hold["hold"]["id"]})
    release_call_ms = (time.monotonic() - released_at) * 1e3
    while (result := client.poll()) is None:
        time.sleep(0.2)
    streams = result["streams"]
    firsts = sorted(s["first"] - released_at for s in streams.values() if s["first"])
    ended = {name: s["ended_early"] for name, s in streams.items() if s["ended_early"]}
    sent = get_json(stats_url)["sent"]
    row = {
        "streams": n,
        "held_before_release": held,
        "all_held_after_s": round(all_held_s, 2),
        "route": {"code": routed[0], "previous": routed[1].get("previous"), "to": new, "from": old},
        "release_code": released[0],
        "release_call_ms": round(release_call_ms, 1),
        "answered_200": sum(1 for s in streams.values() if s["status"] == 200),
        "errors": len(ended),
        "served_by_new": sum(1 for s in streams.values() if s["source"] == "B"),
        "served_by_old": sum(1 for s in streams.values() if s["source"] == "A"),
        "release_to_first_chunk_p50_ms": round(gateway_soak.percentile(firsts, 0.5) * 1e3, 1)
        if firsts
        else None,
        "release_to_first_chunk_p99_ms": round(gateway_soak.percentile(firsts, 0.99) * 1e3, 1)
        if firsts
        else None,
        "release_to_last_first_chunk_ms": round(firsts[-1] * 1e3, 1) if firsts else None,
        "chunks_per_stream": chunks,
        **gateway_soak.account(sent, {k: s["received"] for k, s in streams.items()}, ended, chunks),
        "rss_before_mib": rss_before,
        "rss_held_mib": rss_held,
        "load_after": load(),
    }
    if rss_before is not None and rss_held is not None:
        row["kib_per_held_request"] = round((rss_held - rss_before) * 1024 / max(1, held), 1)
    if ended:
        row["ended_early_examples"] = sorted(set(ended.values()))[:3]
    return row


def _start_columns(makers: dict[str, Callable[[], Column]], wanted: set[str], procs: list) -> list[Column]:
    """Start the `wanted` columns in the order of `makers`; their processes join `procs`."""
    columns = []
    for name, make in makers.items():
        if name in wanted:
            column = make()
            procs.extend(column.procs)
            columns.append(column)
    return columns


def _stop_all(procs: list[subprocess.Popen], workdir: Path) -> None:
    """Stop the benchmark's processes (SIGTERM, then SIGKILL after 10 s) and remove its folder."""
    for proc in reversed(procs):
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    shutil.rmtree(workdir, ignore_errors=True)


def soak(args: argparse.Namespace) -> int:
    """The soak and the switch; prints a table and the JSON (`--json`: also written there)."""
    limits = raise_open_files()
    workdir = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    ports = (free_port(), free_port())
    procs: list[subprocess.Popen[bytes]] = []
    wanted = set(filter(None, args.only.split(","))) or {"direct", "nginx", "gateway"}
    load_start = load()
    figures: dict[str, Any] = {}
    try:
        upstreams = [
            start_soak_upstream(p, name, args.soak_pace_ms) for p, name in zip(ports, "AB", strict=True)
        ]
        procs.extend(upstreams)
        for p in ports:
            wait_http(f"http://127.0.0.1:{p}/health")
        makers: dict[str, Callable[[], Column]] = {
            "direct": lambda: Column("direct", f"http://127.0.0.1:{ports[0]}", [], []),
            "nginx": lambda: start_nginx(workdir, ports[0]),
            "gateway": lambda: start_gateway("gateway", workdir, ports[0], {}),
            "gateway_off": lambda: start_gateway(  # only with --only: not in a default run
                "gateway_off", workdir, ports[0], {"GATEWAY_CONTINUE_STREAMS": "false"}
            ),
        }
        columns = _start_columns(makers, wanted, procs)
        started = time.perf_counter()
        for column in columns:
            print(
                f"soak: {column.name}, {args.soak_streams} streams for {args.soak_seconds:g} s",
                file=sys.stderr,
            )
            figures[column.name] = soak_column(column, upstreams[0], ports[0], args, workdir)
        if "gateway" in wanted and args.switch_streams:
            print(f"soak: switch with {args.switch_streams} held", file=sys.stderr)
            gateway = start_gateway(  # a fresh one: its memory is not the soak's aftermath
                "gateway_switch", workdir, ports[0], {"GATEWAY_MAX_HELD": str(max(256, args.switch_streams))}
            )
            procs.extend(gateway.procs)
            figures["switch"] = soak_switch(gateway, workdir, ports, args)
        seconds = round(time.perf_counter() - started, 1)
    finally:
        _stop_all(procs, workdir)
    if "nginx" in figures:
        floor = figures["nginx"]
        for name in ("gateway", "gateway_off"):
            row = figures.get(name)
            if row and floor.get("proxy_cpu_per_chunk_us") and floor.get("kib_per_held_stream"):
                row["over_nginx"] = {
                    "cpu_per_chunk": round(
                        row["proxy_cpu_per_chunk_us"] / floor["proxy_cpu_per_chunk_us"], 2
                    ),
                    "kib_per_held_stream": round(
                        row["kib_per_held_stream"] / floor["kib_per_held_stream"], 1
                    ),
                    "gap_p99": round(row["gap_p99_ms"] / max(0.01, floor["gap_p99_ms"]), 2),
                }
    report = {
        "soak": figures,
        "settings": {
            k: getattr(args, k)
            for k in (
                "soak_streams",
                "soak_seconds",
                "soak_pace_ms",
                "soak_ramp_s",
                "switch_streams",
                "switch_chunks",
            )
        },
        "open_files_limit": list(limits),
        "seconds": seconds,
        "nginx": subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
        if "nginx" in wanted
        else None,
        "load_average_start": load_start,
        "load_average_end": load(),
        "cpus": os.cpu_count(),
    }
    text = json.dumps(report, indent=2)
    if args.json:  # first: a closed stdout must not lose it
        args.json.write_text(text + "\n")
    print(soak_table(figures))
    print(text)
    broken = sum(row.get("chunks_lost", 0) + row.get("ended_early", 0) for row in figures.values())
    return 1 if broken else 0  # a lost chunk or a cut stream is a fault, not a figure


def soak_table(figures: dict[str, Any]) -> str:
    keys = [
        ("chunks sent / received", lambda r: f"{r['chunks_sent']} / {r['chunks_received']}"),
        ("chunks lost", lambda r: r["chunks_lost"]),
        ("streams ended early", lambda r: r["ended_early"]),
        ("gap p50 / p99 / max ms", lambda r: f"{r['gap_p50_ms']} / {r['gap_p99_ms']} / {r['gap_max_ms']}"),
        ("gaps > 10x pace", lambda r: r["gaps_over_10x"]),
        (
            "stream span p50 / max s",
            lambda r: f"{r['span_p50_s']} / {r['span_max_s']} ({r['span_expected_s']})",
        ),
        ("first chunk p50 / max ms", lambda r: f"{r['first_chunk_p50_ms']} / {r['first_chunk_max_ms']}"),
        ("upstream tick gap max ms", lambda r: r["upstream_ticks"]["gap_max_ms"]),
        ("proxy CPU/chunk us", lambda r: r["proxy_cpu_per_chunk_us"]),
        (
            "CPU cores proxy/upstream/client",
            lambda r: f"{r['proxy_cpu_cores']}/{r['upstream_cpu_cores']}/{r['client_cpu_cores']}",
        ),
        ("RSS before / held MiB", lambda r: f"{r['rss_before_mib']} / {r['rss_held_median_mib']}"),
        ("KiB per held stream", lambda r: r.get("kib_per_held_stream")),
    ]
    names = [n for n in figures if n != "switch"]
    lines = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, get in keys:
        lines.append(f"| {label} | " + " | ".join(str(get(figures[n])) for n in names) + " |")
    if (switch := figures.get("switch")) is not None:
        lines.append(
            f"switch: {switch['held_before_release']} held, {switch['answered_200']} answered 200 "
            f"({switch['served_by_new']} by the new upstream), {switch['errors']} errors, "
            f"{switch['chunks_lost']} chunks lost; first chunk after the release p50 "
            f"{switch['release_to_first_chunk_p50_ms']} ms, last {switch['release_to_last_first_chunk_ms']} ms"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every measurement")
    parser.add_argument("--requests", type=int, default=750, help="small requests per column and round")
    parser.add_argument("--streams", type=int, default=4, help="paced streams per column and round")
    parser.add_argument("--chunks", type=int, default=200, help="chunks of a paced stream")
    parser.add_argument("--pace-ms", type=float, default=1.0, help="ms between a paced stream's chunks")
    parser.add_argument("--fast-chunks", type=int, default=500, help="chunks of a throughput stream")
    parser.add_argument("--concurrency", type=int, default=64, help="concurrent streams")
    parser.add_argument("--only", default="", help="comma-separated columns to run (default: all)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="another gateway column (continue_streams on) run from the source tree DIR (e.g. an older commit's)",
    )
    parser.add_argument("--soak", action="store_true", help="run the soak and the switch (see above)")
    parser.add_argument("--soak-streams", type=int, default=512, help="streams held at once")
    parser.add_argument("--soak-seconds", type=float, default=60.0, help="how long each stream lasts")
    parser.add_argument("--soak-pace-ms", type=float, default=10.0, help="ms between a stream's chunks")
    parser.add_argument("--soak-ramp-s", type=float, default=1.0, help="seconds over which streams open")
    parser.add_argument(
        "--switch-streams", type=int, default=512, help="streams held during the switch (0: none)"
    )
    parser.add_argument("--switch-chunks", type=int, default=20, help="chunks of a stream after the switch")
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--soak-upstream", help=argparse.SUPPRESS)
    parser.add_argument("--soak-client", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.soak_upstream:
        port, name, pace = args.soak_upstream.split(":")
        gateway_soak.serve(int(port), name, float(pace))
        return 0
    if args.soak_client:
        gateway_soak.client(json.loads(args.soak_client))
        return 0
    if args.soak:
        return soak(args)
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    upstream_port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    wanted = set(filter(None, args.only.split(","))) or {"nginx", "gateway", "gateway_off"}
    try:
        upstream = start_upstream(upstream_port)
        procs.append(upstream)
        wait_http(f"http://127.0.0.1:{upstream_port}/health")
        makers: dict[str, Callable[[], Column]] = {
            "nginx": lambda: start_nginx(workdir, upstream_port),
            "gateway": lambda: start_gateway("gateway", workdir, upstream_port, {}),
            "gateway_off": lambda: start_gateway(
                "gateway_off", workdir, upstream_port, {"GATEWAY_CONTINUE_STREAMS": "false"}
            ),
        }
        for spec in args.also:
            name, _, source = spec.partition("=")
            makers[f"gateway_{name}"] = lambda name=name, source=source: start_gateway(
                f"gateway_{name}", workdir, upstream_port, {}, Path(source)
            )
            wanted.add(f"gateway_{name}")
        columns = [Column("direct", f"http://127.0.0.1:{upstream_port}", [], [])]
        columns += _start_columns(makers, wanted, procs)
        started = time.perf_counter()
        figures = asyncio.run(measure(columns, args))
        gateways = {
            c.name: round(rss_kib(c.pids[0]) / 1024, 1) for c in columns if c.name.startswith("gateway")
        }
        report = {
            "columns": figures,
            "targets_over_nginx_with_continue_streams_on": TARGETS,
            "gateway_rss_mib": gateways,
            "settings": {
                k: getattr(args, k)
                for k in (
                    "rounds",
                    "requests",
                    "streams",
                    "chunks",
                    "pace_ms",
                    "fast_chunks",
                    "concurrency",
                    "also",
                )
            },
            "seconds": round(time.perf_counter() - started, 1),
            "nginx": subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
            if "nginx" in wanted
            else None,
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count(),
        }
    finally:
        _stop_all(procs, workdir)
    print(table(figures, args.concurrency))
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    ended = sum(row["ended_early"] for row in figures.values())
    return 1 if ended else 0


if __name__ == "__main__":
    sys.exit(main())
