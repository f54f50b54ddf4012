"""Streams from real vLLM (CPU build) arrive through the gateway chunk by chunk.

On a host whose CPUs are saturated (vLLM's engine threads compute and busy-wait; here a
container of spinning processes adds to them), a gateway at Docker's default CPU weight
waits runnable for the whole generation and forwards the stream all at once, on new and
reused client connections alike. The rendered gateway service carries a high CPU weight
(`cpu_shares`), so it runs as soon as a chunk arrives. Checked on one reused client
connection, several requests in a row, while the CPUs are saturated.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from composer.render.gateway import CPU_SHARES
from tests.vllm_cpu.conftest import run
from tests.vllm_cpu.stack import PREFIX, SERVED, Stack

pytestmark = [pytest.mark.docker, pytest.mark.vllm_cpu]

REQUESTS = 12
TOKENS = 96
# Spinning processes, one per CPU, that stop by themselves (the test also removes them).
BURNER = (
    "import multiprocessing as m, os, time\n"
    "def spin():\n"
    "    end = time.time() + 240\n"
    "    while time.time() < end:\n"
    "        pass\n"
    "ps = [m.Process(target=spin) for _ in range(os.cpu_count() or 2)]\n"
    "[p.start() for p in ps]\n"
    "[p.join() for p in ps]\n"
)


@pytest.fixture(scope="module")
def serving_stack(cpu_stack: Stack) -> Stack:
    """The tier's shared stack serving ngram (what test_server.py needs next: no extra boot)."""
    cpu_stack.ensure_serving("ngram")
    return cpu_stack


@pytest.fixture
def saturated_cpus(cpu_image: str, docker_client) -> Iterator[None]:
    """Every CPU of the host busy with a spinning process (in a container, default weight)."""
    name = f"{PREFIX}-burn-{uuid.uuid4().hex[:8]}"
    done = run(
        "docker", "run", "-d", "--rm", "--name", name, "--network", "none",
        "--entrypoint", "python3", cpu_image, "-c", BURNER,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    time.sleep(1.0)
    try:
        yield
    finally:
        run("docker", "rm", "-f", name)


def arrival_times(client: httpx.Client, server: Stack) -> list[float]:
    """Seconds from sending one streaming completion to each read of its body."""
    body = {
        "model": SERVED,
        "prompt": "hello world the model",
        "max_tokens": TOKENS,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    started = time.perf_counter()
    times: list[float] = []
    with client.stream("POST", f"{server.url}/v1/completions", json=body, headers=server.headers) as response:
        assert response.status_code == 200, response.read()
        for _ in response.iter_raw():
            times.append(time.perf_counter() - started)
    return times


def test_gateway_runs_at_a_high_cpu_weight(serving_stack, docker_client):
    (gateway,) = docker_client.containers.list(
        filters={
            "label": [
                f"com.docker.compose.project={serving_stack.project}",
                "com.docker.compose.service=gateway",
            ]
        }
    )
    assert gateway.attrs["HostConfig"]["CpuShares"] == CPU_SHARES


def test_streams_arrive_chunk_by_chunk_on_a_reused_connection(serving_stack, saturated_cpus):
    """Each stream's reads spread over most of its duration (all at once: a spread near 0)."""
    spreads = []
    with httpx.Client(timeout=120) as client:  # one keep-alive connection for every request
        for _ in range(REQUESTS):
            times = arrival_times(client, serving_stack)
            assert len(times) > 1, "the whole stream came in one read"
            spreads.append((times[-1] - times[0]) / times[-1])
    # At the default weight most of them arrive at once here (spreads of 0.0-0.3); one
    # late stream is tolerated, since other work on the host is not under this test's control.
    late = [s for s in spreads if s < 0.5]
    assert len(late) <= 1, "spreads: " + " ".join(f"{s:.2f}" for s in spreads)
