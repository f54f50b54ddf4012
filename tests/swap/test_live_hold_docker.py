"""The last container that serves is never stopped bare, and a failed change leaves nothing
restarting (real daemon, simulator, GPU_DEVICES=none). One stack, `[gateway] live = ["mtp"]`:

(a) the set {mtp/1}, mtp's configuration changed: `up` replaces the last member serving, so
    it leaves first, under a hold; 8 long greedy streams in flight and a steady client: no
    request fails, every stream goes on token for token on the new mtp/1 (the simulator's
    greedy ids for its prompt, computed here), the steady client is held, then served;
(b) on the set {mtp/1, baseline/1}, `up mtp-crash --no-rollback`: the set serves throughout,
    mtp-crash is left exited (never restarted), neither a member nor serving; `up baseline mtp`
    removes it;
(c) aliases and `spill` changed while the set runs: `--dry-run` names the in-place change, `up`
    applies it with no new container, and the alias is answered.

(The lone serving container whose GPUs a live change needs, and `up X` whose one container
needs every GPU, take the same hold in their plans; with GPU_DEVICES=none no GPU is shared, so
they are shown by tests/swap/test_live_plan.py and tests/swap/test_desired.py.)"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import httpx
import pytest

from tests.gateway.livelab import Client as Stream
from tests.swap.test_continue_docker import COMPLETIONS, MAX_TOKENS, _expected, _requests, _wait_ids
from tests.swap.test_live_docker import Client

pytestmark = pytest.mark.docker

STREAMS = 8
PLACEMENT = """
[gateway]
live = ["mtp"]
[variants.baseline]
gpus = "0,1"
[variants.mtp]
gpus = "2,3"
"""


def _through(stack, argv: tuple[str, ...], expected: list) -> tuple[dict, list[tuple[int, str]]]:
    """Eight streams and a steady client through `up ARGV --json`: its result and the client's answers."""
    requests = _requests()[:STREAMS]
    with Client(f"http://127.0.0.1:{stack.port}", stack.api_key) as steady:
        streams = [Stream(stack.port, COMPLETIONS, r, stack.api_key).start() for r in requests]
        _wait_ids(streams, 50)
        while len(steady.answers) < 3:
            threading.Event().wait(0.05)
        began = time.monotonic()
        up = stack.popen(*argv, "--json")
        try:
            out, err = up.communicate(timeout=400)
        except subprocess.TimeoutExpired:
            up.kill()
            raise
        print(
            f"\n{' '.join(argv)} took {time.monotonic() - began:.1f}s; ids at its end:",
            [len(s.ids()) for s in streams],
        )
        assert up.returncode == 0, err
        during = len(steady.answers)
        while len(steady.answers) < during + 5:
            threading.Event().wait(0.05)
    for stream, (ids, text) in zip(streams, expected[:STREAMS], strict=True):
        stream.join()
        assert stream.status == 200 and stream.events[-1] == "[DONE]", stream.raw[-300:]
        assert not any("error" in c for c in stream.chunks), stream.raw[-300:]
        assert len({c["id"] for c in stream.chunks}) == 1
        assert stream.ids() == ids  # exactly max_tokens, none missing or repeated
        assert stream.text() == text
        assert stream.usage()["completion_tokens"] == MAX_TOKENS
    return json.loads(out.splitlines()[-1]), steady.answers


def _container_of(docker_client, project: str, variant: str) -> list:
    labels = [f"com.docker.compose.project={project}", f"vllm-composer.variant={variant}"]
    return docker_client.containers.list(all=True, filters={"label": labels})


def test_the_last_serving_member_is_held_before_it_stops_and_a_failed_one_never_restarts(
    sim_stack, docker_client
) -> None:
    text = sim_stack.stack_file.read_text() + PLACEMENT
    sim_stack.stack_file.write_text(text.replace('SIM_TIME_SCALE = "20"', 'SIM_TIME_SCALE = "2"'))
    expected = [_expected(r) for r in _requests()[:STREAMS]]
    assert sim_stack.run("up", timeout=300).returncode == 0
    assert [row["name"] for row in sim_stack.status()["live"]] == ["mtp/1"]
    changed = sim_stack.stack_file.read_text().replace(
        'gpus = "2,3"\n', 'gpus = "2,3"\nenv = { SIM_LOAD_SECONDS = "0.5" }\n'
    )
    sim_stack.stack_file.write_text(changed)

    # (a) mtp/1 changed: the last member serving leaves first, held, and starts again
    plan = sim_stack.run("up", "--dry-run", "--json")
    assert plan.returncode == 0, plan.stderr
    ops = [op["op"] for op in json.loads(plan.stdout)["plan"]["operations"]]
    assert ops[:2] == ["Hold", "Stop"] and ops[-1] == "Release", ops
    result, answers = _through(sim_stack, ("up",), expected)
    assert {status for status, _ in answers} == {200}, answers  # held, then served: none failed
    assert result["drained"] == {"cut": 0, "continued": STREAMS, "refused": 0}, result
    assert [row["name"] for row in sim_stack.status()["live"]] == ["mtp/1"]

    # (b) a failed `up X --no-rollback` on a set: the set serves on, X never restarts nor counts
    assert sim_stack.run("up", "mtp", "baseline", timeout=300).returncode == 0
    with Client(f"http://127.0.0.1:{sim_stack.port}", sim_stack.api_key) as steady:
        while len(steady.answers) < 3:
            threading.Event().wait(0.05)
        failed = sim_stack.run("up", "mtp-crash", "--no-rollback", timeout=300)
        assert failed.returncode == 1 and "rollback disabled" in failed.stderr, failed.stderr
        assert "removing mtp-crash" not in failed.stdout + failed.stderr
        (crash,) = _container_of(docker_client, sim_stack.project, "mtp-crash")
        deadline = time.monotonic() + 60
        while crash.status != "exited":  # it crashed and stays down
            assert time.monotonic() < deadline, crash.status
            threading.Event().wait(0.2)
            crash.reload()
        assert crash.attrs["HostConfig"]["RestartPolicy"]["Name"] == "no"
        for _ in range(3):  # never counted: each status read while it stays exited
            status = sim_stack.status(exits=(0, 1))
            assert sorted(row["name"] for row in status["live"]) == ["baseline/1", "mtp/1"], status
            assert status["variant"] != "mtp-crash", status
        crash.reload()
        assert crash.status == "exited", crash.status
        during = len(steady.answers)
        while len(steady.answers) < during + 5:
            threading.Event().wait(0.05)
    assert {code for code, _ in steady.answers} == {200}, steady.answers  # the set served throughout
    plan = sim_stack.run("up", "baseline", "mtp", "--dry-run")
    assert f"Stop: stop and remove {crash.name}" in plan.stdout, plan.stdout
    done = sim_stack.run("up", "baseline", "mtp", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _container_of(docker_client, sim_stack.project, "mtp-crash") == []
    assert sorted(row["name"] for row in sim_stack.status()["live"]) == ["baseline/1", "mtp/1"]

    # (c) aliases and a gateway setting changed for the running set: applied in place, no new container
    gateway = docker_client.containers.get(f"{sim_stack.project}-gateway-1").id
    text = sim_stack.stack_file.read_text().replace('live = ["mtp"]\n', 'live = ["mtp"]\nspill = 3\n')
    text = text.replace("[variants.baseline]\n", '[variants.baseline]\naliases = ["fast"]\n')
    sim_stack.stack_file.write_text(text)
    plan = sim_stack.run("up", "baseline", "mtp", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "UpdateGateway: apply the gateway's changed settings in place (" in plan.stdout, plan.stdout
    assert "aliases" in plan.stdout and "spill" in plan.stdout, plan.stdout
    done = sim_stack.run("up", "baseline", "mtp", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert docker_client.containers.get(f"{sim_stack.project}-gateway-1").id == gateway
    headers = {"Authorization": f"Bearer {sim_stack.api_key}"}
    body = {"model": "fast", "prompt": "hello", "max_tokens": 4}
    url = f"http://127.0.0.1:{sim_stack.port}/v1/completions"
    reply = httpx.post(url, json=body, headers=headers, timeout=60)
    assert reply.status_code == 200 and reply.headers.get("x-served-by") == "baseline/1", reply.text
    again = sim_stack.run("up", "baseline", "mtp", "--json")
    assert json.loads(again.stdout)["outcome"] == "unchanged", again.stdout
