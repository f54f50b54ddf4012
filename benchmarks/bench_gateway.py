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

Usage: .venv/bin/python benchmarks/bench_gateway.py [--rounds N] [--requests N] [--streams N]
           [--chunks N] [--pace-ms MS] [--json PATH] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
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
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
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
        for name, make in makers.items():
            if name in wanted:
                column = make()
                procs.extend(column.procs)
                columns.append(column)
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
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(workdir, ignore_errors=True)
    print(table(figures, args.concurrency))
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    ended = sum(row["ended_early"] for row in figures.values())
    return 1 if ended else 0


if __name__ == "__main__":
    sys.exit(main())
