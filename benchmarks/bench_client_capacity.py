"""How fast the benchmark client can take in one stream (not collected by pytest).

Starts the simulator locally in plain decode (one token per SSE chunk, the client's worst
case) with time running SIM_TIME_SCALE times faster, streams long completions through
composer.bench.client.stream_chat and prints what the client measured, plus the client's
CPU time per token. The decode rates the benchmark reports are only trustworthy well below
the rate printed here.

    python3 benchmarks/bench_client_capacity.py [--scale 2000] [--tokens 20000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from composer.bench.client import ChatRequest, make_client, stream_chat  # noqa: E402

SIM_SRC = REPO / "images" / "sim" / "src"
MODEL = REPO / "images" / "sim" / "models" / "Qwen3.8-27B"
REQUIRED_TOK_S = 2000.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_sim(port: int, scale: float, max_len: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIM_", "VLLM_"))}
    env.update({"PYTHONPATH": str(SIM_SRC), "SIM_TIME_SCALE": str(scale), "SIM_LOAD_SECONDS": "0"})
    argv = [sys.executable, "-m", "vllm", "serve", str(MODEL), "--served-model-name", "m"]
    argv += ["--port", str(port), "--host", "127.0.0.1", "--max-model-len", str(max_len)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_ready(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"the simulator did not start within {timeout:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=2000.0, help="SIM_TIME_SCALE (default 2000)")
    parser.add_argument("--tokens", type=int, default=20000, help="tokens per request (default 20000)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    sim = start_sim(port, args.scale, args.tokens + 1000)
    try:
        wait_ready(url)
        request = ChatRequest(model="m", max_tokens=args.tokens)
        rates, cpu_per_token = [], []
        with make_client(url, None, timeout=120) as client:
            stream_chat(client, ChatRequest(model="m", max_tokens=50), "warm up")
            for i in range(args.runs):
                cpu = time.process_time()
                result = stream_chat(client, request, f"capacity run {i}")
                cpu = time.process_time() - cpu
                rates.append(result.decode_tok_s)
                cpu_per_token.append(cpu / result.completion_tokens)
                print(
                    f"run {i + 1}: {result.completion_tokens} tokens in {result.chunks} chunks, "
                    f"{result.decode_tok_s:,.0f} tok/s observed, "
                    f"client CPU {1e6 * cpu_per_token[-1]:.1f} us/token"
                )
    finally:
        sim.terminate()
        sim.wait(timeout=10)
    observed = statistics.median(rates)
    ceiling = 1 / statistics.median(cpu_per_token)
    print(f"median observed: {observed:,.0f} tok/s (server-bound: simulator at {args.scale:g}x)")
    print(f"client CPU ceiling: {ceiling:,.0f} tok/s (one token per chunk)")
    ok = observed >= REQUIRED_TOK_S
    print(f"{'PASS' if ok else 'FAIL'}: one stream parsed at >= {REQUIRED_TOK_S:,.0f} tok/s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
