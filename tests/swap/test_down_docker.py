"""`down` on the real daemon with the simulator: it drains what is in flight and says what it
cut (`-t`), plans with `--dry-run` (nothing changes), names each container once; and `down
VARIANT` of a failed variant beside a live set stops only it, the set serving throughout."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.swap.conftest import running_containers
from tests.swap.test_live_docker import Client, _ids, _live

pytestmark = pytest.mark.docker


def _stream_started(sim_stack, tokens: int) -> tuple[threading.Thread, list[str]]:
    """A streaming completion of `tokens` tokens on a thread; returns once its first chunk came."""
    chunks: list[str] = []
    first = threading.Event()

    def run() -> None:
        body = {
            "model": "claude-opus-5",
            "prompt": "hi",
            "max_tokens": tokens,
            "stream": True,
            "ignore_eos": True,
        }
        headers = {"Authorization": f"Bearer {sim_stack.api_key}"}
        try:
            with httpx.stream(
                "POST",
                f"http://127.0.0.1:{sim_stack.port}/v1/completions",
                json=body,
                headers=headers,
                timeout=120,
            ) as reply:
                for line in reply.iter_lines():
                    chunks.append(line)
                    first.set()
        except httpx.HTTPError as err:
            chunks.append(f"error: {type(err).__name__}")
        finally:
            first.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert first.wait(120) and not chunks[0].startswith("error"), chunks
    return thread, chunks


def test_down_plans_drains_and_says_what_it_cut(sim_stack, docker_client) -> None:
    assert sim_stack.run("up", "baseline").returncode == 0
    before = _ids(docker_client, sim_stack.project)
    planned = sim_stack.run("down", "--dry-run")
    assert planned.returncode == 0, planned.stderr
    lines = planned.stdout.splitlines()
    assert lines[0] == "plan: {baseline} -> nothing (down; leaving: baseline)", lines
    assert lines[1] == "  1. Hold: hold new requests at the gateway and drain those in flight"
    assert lines[2].startswith("  2. Stop: stop baseline (") and "StopProject" in lines[3]
    data = json.loads(sim_stack.run("down", "--dry-run", "--json").stdout)  # up --dry-run --json's shape
    assert data["outcome"] == "planned" and data["plan"]["mode"] == "down"
    assert [op["op"] for op in data["plan"]["operations"]] == ["Hold", "Stop", "StopProject"]
    assert _ids(docker_client, sim_stack.project) == before  # a plan changes nothing

    stream, chunks = _stream_started(sim_stack, 100_000)  # far longer than the drain allows
    done = sim_stack.run("down", "-t", "1", timeout=120)
    stream.join(60)
    assert done.returncode == 0, done.stderr
    assert any("stream cut" in chunk for chunk in chunks), chunks[-4:]  # the client is told
    assert "stopped baseline; 0 request(s) in flight finished, 1 cut at the drain timeout (1s)" in done.stdout
    assert running_containers(docker_client, sim_stack.project) == []
    events = json.loads(sim_stack.run("history", "--json").stdout)
    assert events[-1]["kind"] == "down" and events[-1]["drained"] == {"finished": 0, "cut": 1}

    assert sim_stack.run("up", "baseline").returncode == 0
    stream, chunks = _stream_started(sim_stack, 8000)  # seconds long: it finishes within the drain
    done = sim_stack.run("down", timeout=120)
    stream.join(60)
    assert done.returncode == 0 and "1 request(s) in flight finished, none cut" in done.stdout, done.stdout
    assert "data: [DONE]" in chunks and not any('"error"' in c for c in chunks), chunks[-3:]
    rows = len(json.loads(sim_stack.run("history", "--json").stdout))
    nothing = sim_stack.run("down")
    assert nothing.returncode == 0 and "nothing was running" in nothing.stdout
    assert len(json.loads(sim_stack.run("history", "--json").stdout)) == rows  # no row for nothing


def _upstreams(sim_stack) -> list[str]:
    """The live members `status` lists (it exits 1 while a failed variant crash-loops)."""
    return sorted(row["name"] for row in sim_stack.status(exits=(0, 1))["live"])


def test_down_of_a_failed_variant_on_a_live_set_removes_only_it(sim_stack, docker_client) -> None:
    _live(sim_stack)
    assert sim_stack.run("up", "baseline", "mtp", timeout=300).returncode == 0
    assert _upstreams(sim_stack) == ["baseline/1", "mtp/1"]
    failed = sim_stack.run("up", "mtp-crash", "--no-rollback", timeout=300)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    # the failed mtp-crash is left exited, never restarting again (its restart policy is `no`),
    # and is no member; baseline/1 and mtp/1 serve throughout
    assert {"baseline/1", "mtp/1"} == set(_upstreams(sim_stack)), failed.stderr
    crash = docker_client.containers.list(
        all=True,
        filters={
            "label": [f"com.docker.compose.project={sim_stack.project}", "vllm-composer.variant=mtp-crash"]
        },
    )[0]
    deadline = time.monotonic() + 120
    while crash.status != "exited":
        assert time.monotonic() < deadline, (crash.status, crash.attrs["RestartCount"])
        threading.Event().wait(0.1)
        crash.reload()
    assert crash.attrs["HostConfig"]["RestartPolicy"]["Name"] == "no"
    # Docker may have restarted it while the gate judged it (a restart fails the gate); once `up`
    # returned it stays exited: no restart comes after
    restarts = crash.attrs["RestartCount"]
    threading.Event().wait(3.0)
    crash.reload()
    assert (crash.status, crash.attrs["RestartCount"]) == ("exited", restarts)
    kept = {
        name: ident
        for name, (ident, status) in _ids(docker_client, sim_stack.project).items()
        if status == "running" and "crash" not in name
    }
    with Client(f"http://127.0.0.1:{sim_stack.port}", sim_stack.api_key) as client:
        while len(client.answers) < 5:
            threading.Event().wait(0.05)
        done = sim_stack.run("down", "mtp-crash", timeout=180)
        after = len(client.answers)
        while len(client.answers) < after + 10:
            threading.Event().wait(0.05)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("stopped mtp-crash (") and "serve" in done.stdout, done.stdout
    assert {status for status, _ in client.answers} == {200}, client.answers
    now = _ids(docker_client, sim_stack.project)
    assert not [name for name in now if "crash" in name]
    assert {name: now[name][0] for name in kept} == kept  # the set, the gateway, its port holder
    assert all(now[name][1] == "running" for name in kept)
    assert _upstreams(sim_stack) == ["baseline/1", "mtp/1"]

    planned = sim_stack.run("down", "--dry-run")  # the set: each container named once
    assert planned.returncode == 0, planned.stderr
    stops = [line for line in planned.stdout.splitlines() if "Stop:" in line]
    assert [line.split("stop ")[1].split(" ")[0] for line in stops] == ["baseline/1", "mtp/1"], planned.stdout
    done = sim_stack.run("down", timeout=180)
    assert done.returncode == 0 and done.stdout.startswith(f"{sim_stack.project}: stopped baseline/1, mtp/1;")
    assert running_containers(docker_client, sim_stack.project) == []


def test_restart_replaces_the_serving_container_through_the_gate(sim_stack, docker_client) -> None:
    assert sim_stack.run("up", "baseline").returncode == 0
    (before,) = running_containers(docker_client, sim_stack.project)
    other = sim_stack.run("restart", "mtp")
    assert other.returncode == 2 and "mtp does not serve (baseline does)" in other.stderr, other.stderr
    done = sim_stack.run("restart", "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["variant"] == "baseline" and "gate" in result["plan"]["steps"], result
    (after,) = running_containers(docker_client, sim_stack.project)
    assert after.id != before.id and after.labels["vllm-composer.variant"] == "baseline"
    assert sim_stack.status()["health"] == "ready"
