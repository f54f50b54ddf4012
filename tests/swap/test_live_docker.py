"""Live sets on the real daemon with the simulator (GPU_DEVICES=none, distinct simulated GPU
sets): `up baseline mtp --with prometheus` runs both behind the one gateway, Prometheus
scraping each, and `up --recreate-gateway` brings a gateway that routes to both again; `up baseline mtp` on a live
{baseline} joins without baseline stopping and without a refused request; `down baseline` drains it
out; `up baseline` on a live {baseline, mtp} replaces the set: baseline alone serves afterwards.

Needs a gateway image with live upstreams (POST /upstreams, x-served-by): set GATEWAY_IMAGE
to it when the default image predates them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest

from tests.conftest import REPO, free_port
from tests.swap.conftest import running_containers
from tests.swap.test_faults import StderrLines

pytestmark = pytest.mark.docker

PLACEMENT = """
[gateway]
live = ["baseline"]
[variants.baseline]
gpus = "0,1"
[variants.mtp]
gpus = "2,3"
"""


@dataclass
class Client:
    """One client sending small completions until stopped; every answer recorded."""

    url: str
    key: str
    answers: list[tuple[int, str]] = field(default_factory=list)  # (status or 0 for an error, served by)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        body = {"model": "claude-opus-5", "prompt": "hello", "max_tokens": 4}
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(timeout=httpx.Timeout(60.0, connect=5.0), trust_env=False) as http:
            while not self._stop.is_set():
                try:
                    reply = http.post(self.url + "/v1/completions", json=body, headers=headers)
                    self.answers.append((reply.status_code, reply.headers.get("x-served-by", "")))
                except httpx.HTTPError as err:
                    self.answers.append((0, type(err).__name__))

    def __enter__(self) -> Client:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=90)


def _live(sim_stack, gateway: str = "") -> None:
    placement = PLACEMENT.replace("[gateway]\n", f"[gateway]\n{gateway}")
    sim_stack.stack_file.write_text(sim_stack.stack_file.read_text() + placement, encoding="utf-8")


def _container(docker_client, project: str, member: str):
    found = docker_client.containers.list(
        filters={"label": [f"com.docker.compose.project={project}", f"vllm-composer.live={member}"]}
    )
    assert len(found) == 1, [c.name for c in found]
    return found[0]


def _members(docker_client, project: str, member: str) -> list:
    labels = [f"com.docker.compose.project={project}", f"vllm-composer.live={member}"]
    return docker_client.containers.list(all=True, filters={"label": labels})


def _gateway_upstreams(sim_stack) -> dict[str, dict]:
    status = sim_stack.status()
    return {row["name"]: row for row in status["live"]}


def _served(sim_stack, count: int = 20) -> list[tuple[int, str]]:
    with Client(f"http://127.0.0.1:{sim_stack.port}", sim_stack.api_key) as client:
        while len(client.answers) < count:
            threading.Event().wait(0.05)
    return client.answers


def test_up_two_variants_runs_both_on_their_own_gpu_sets(sim_stack, docker_client) -> None:
    _live(sim_stack, f"prometheus_port = {free_port()}\n")
    plan = sim_stack.run("up", "baseline", "mtp", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "start baseline/1 on GPUs 0,1" in plan.stdout and "start mtp/1 on GPUs 2,3" in plan.stdout
    done = sim_stack.run("up", "baseline", "mtp", "--with", "prometheus", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "prometheus runs (the prometheus profile)" in done.stdout + done.stderr
    (prometheus,) = docker_client.containers.list(
        filters={
            "label": [f"com.docker.compose.project={sim_stack.project}", "vllm-composer.role=prometheus"]
        }
    )
    config = prometheus.exec_run(["cat", "/etc/prometheus/prometheus.yml"]).output.decode()
    assert '"vllm-baseline-1:8000"' in config and '"vllm-mtp-1:8000"' in config  # every member scraped
    assert "live set baseline/1 (GPUs 0,1), mtp/1 (GPUs 2,3)" in done.stdout
    baseline = _container(docker_client, sim_stack.project, "baseline/1")
    mtp = _container(docker_client, sim_stack.project, "mtp/1")
    assert (baseline.labels["vllm-composer.gpus"], mtp.labels["vllm-composer.gpus"]) == ("0,1", "2,3")
    rows = _gateway_upstreams(sim_stack)
    assert {name: (row["gpus"], row["ready"]) for name, row in rows.items()} == {
        "baseline/1": ("0,1", True),
        "mtp/1": ("2,3", True),
    }
    answers = _served(sim_stack)
    assert {status for status, _ in answers} == {200}
    assert {served for _, served in answers} <= {"baseline/1", "mtp/1"}
    again = sim_stack.run("up", "baseline", "mtp", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["outcome"] == "unchanged", again.stderr

    # A recreated gateway routes to the same live containers (told from their labels).
    old = docker_client.containers.get(f"{sim_stack.project}-gateway-1").id
    recreated = sim_stack.run("up", "--recreate-gateway", timeout=300)
    assert recreated.returncode == 0, recreated.stderr
    assert "the live set baseline/1, mtp/1 serves through it again" in recreated.stdout
    assert docker_client.containers.get(f"{sim_stack.project}-gateway-1").id != old
    rows = _gateway_upstreams(sim_stack)
    assert {name: row["ready"] for name, row in rows.items()} == {"baseline/1": True, "mtp/1": True}
    answers = _served(sim_stack)
    assert {status for status, _ in answers} == {200}, answers
    assert {served for _, served in answers} <= {"baseline/1", "mtp/1"}, answers


def test_mtp_joins_a_live_baseline_without_stopping_it_or_refusing_a_request(
    sim_stack, docker_client
) -> None:
    _live(sim_stack)
    first = sim_stack.run("up", timeout=300)  # [gateway] live = ["baseline"]
    assert first.returncode == 0, first.stderr
    baseline = _container(docker_client, sim_stack.project, "baseline/1")
    started = baseline.attrs["State"]["StartedAt"]
    with Client(f"http://127.0.0.1:{sim_stack.port}", sim_stack.api_key) as client:
        while len(client.answers) < 5:
            threading.Event().wait(0.05)
        before = len(client.answers)
        joined = sim_stack.run("up", "baseline", "mtp", timeout=300)
        assert joined.returncode == 0, joined.stderr
        during = len(client.answers)
        while len(client.answers) < during + 20:
            threading.Event().wait(0.05)
    assert joined.stdout.strip().startswith("baseline+mtp: live set baseline/1 (GPUs 0,1), mtp/1 (GPUs 2,3)")
    assert {status for status, _ in client.answers} == {200}, client.answers  # none refused, none failed
    baseline.reload()
    assert baseline.status == "running" and baseline.attrs["State"]["StartedAt"] == started  # never restarted
    assert {served for _, served in client.answers[:before]} == {"baseline/1"}
    rows = _gateway_upstreams(sim_stack)
    assert sorted(rows) == ["baseline/1", "mtp/1"] and all(row["ready"] for row in rows.values())
    history = sim_stack.run("history", "--json")
    assert history.returncode == 0 and "start mtp/1" in history.stdout

    with Client(f"http://127.0.0.1:{sim_stack.port}", sim_stack.api_key) as client:
        left = sim_stack.run("down", "baseline", timeout=180)
        assert left.returncode == 0, left.stderr
        assert "stopped baseline (baseline/1); the live set serves on" in left.stdout
        after = len(client.answers)
        while len(client.answers) < after + 10:
            threading.Event().wait(0.05)
    assert {status for status, _ in client.answers} == {200}, client.answers
    assert {served for _, served in client.answers[after:]} == {"mtp/1"}
    assert sorted(_gateway_upstreams(sim_stack)) == ["mtp/1"]
    event = json.loads(sim_stack.run("history", "--json").stdout)[-1]  # a live change: the set less baseline
    assert (event["kind"], event["source"], event["target"], event["outcome"]) == (
        "live",
        "baseline+mtp",
        "mtp",
        "stopped",
    ), event
    assert any(step.startswith("drain") and "baseline/1" in step for step in event["steps"]), event


def _backend_ready_within(sim_stack, seconds: float) -> bool:
    """Whether the gateway says its backend is ready before `seconds` pass (polled)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            health = httpx.get(f"http://127.0.0.1:{sim_stack.port}/gateway/health", timeout=2).json()
            if health.get("backend_ready"):
                return True
        except (httpx.HTTPError, ValueError):
            pass  # restarting: not listening yet
        time.sleep(0.2)
    return False


def _ids(docker_client, project: str) -> dict[str, tuple[str, str]]:
    """Every container of the project: name -> (id, status)."""
    found = docker_client.containers.list(
        all=True, filters={"label": f"com.docker.compose.project={project}"}
    )
    return {c.name: (c.id, c.status) for c in found}


def _events(sim_stack) -> list[dict]:
    done = sim_stack.run("history", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _started(sim_stack, *args: str) -> tuple[subprocess.Popen, StderrLines]:
    """`compose-spec ARGS` started in the background, its stderr read line by line."""
    process = subprocess.Popen(
        sim_stack.args(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=sim_stack.env,
        cwd=REPO,
    )
    lines = StderrLines(process)
    lines.start()
    return process, lines


def _under_load(sim_stack, *args: str):
    """Run `up ARGS` while a client sends completions; the client's answers after it."""
    with Client(f"http://127.0.0.1:{sim_stack.port}", sim_stack.api_key) as client:
        while len(client.answers) < 5:
            threading.Event().wait(0.05)
        done = sim_stack.run("up", *args, timeout=300)
        after = len(client.answers)
        while len(client.answers) < after + 5:
            threading.Event().wait(0.05)
    return done, client.answers


def test_a_live_change_that_fails_a_gate_is_undone_and_dry_runs_change_nothing(
    sim_stack, docker_client
) -> None:
    """{baseline} alone, then {baseline, mtp}: `up baseline mtp-crash` (its gate fails) leaves
    the set that served, serving, with no failed request; `--no-rollback` leaves it in place."""
    placement = PLACEMENT.replace('[gateway]\nlive = ["baseline"]\n', "")
    assert "live =" not in placement  # no [gateway] live: `up baseline` is the one-variant swap
    sim_stack.stack_file.write_text(sim_stack.stack_file.read_text() + placement, encoding="utf-8")
    assert sim_stack.run("up", "baseline", timeout=300).returncode == 0
    (single,) = [
        c
        for c in docker_client.containers.list(
            filters={
                "label": [f"com.docker.compose.project={sim_stack.project}", "vllm-composer.variant=baseline"]
            }
        )
    ]
    started = single.attrs["State"]["StartedAt"]
    before = _ids(docker_client, sim_stack.project)
    plan = sim_stack.run("up", "baseline", "mtp", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "(join)" in plan.stdout and "Start: start mtp/1 on GPUs 2,3" in plan.stdout
    assert "Gate: gate mtp/1" in plan.stdout and "Stop:" not in plan.stdout
    assert f"Start: adopt {single.name} as baseline/1 as it runs (not restarted)" in plan.stdout
    assert _ids(docker_client, sim_stack.project) == before

    events = len(_events(sim_stack))
    failed, answers = _under_load(sim_stack, "baseline", "mtp-crash")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "mtp-crash/1" in failed.stderr and "CUDA error: unspecified launch failure" in failed.stderr
    assert "(whole log kept in " in failed.stderr and failed.stderr.count("--- end of log ---") == 1
    kept_log = sim_stack.run("logs", "--failed")  # the failed member's evidence, as a swap keeps it
    assert kept_log.returncode == 0 and "CUDA error" in kept_log.stdout, kept_log.stderr
    assert {status for status, _ in answers} == {200}, answers
    single.reload()
    assert single.status == "running" and single.attrs["State"]["StartedAt"] == started  # never restarted
    assert _ids(docker_client, sim_stack.project) == before  # the live containers it started are gone
    assert sim_stack.status()["variant"] == "baseline"
    assert len(_events(sim_stack)) == events + 1 and _events(sim_stack)[-1]["outcome"] == "rolled back"

    # A successful join adopts the one serving baseline as baseline/1: same container, never restarted.
    assert sim_stack.run("up", "baseline", "mtp", timeout=300).returncode == 0
    single.reload()
    assert single.status == "running" and single.attrs["State"]["StartedAt"] == started
    assert single.id in {c.id for c in docker_client.containers.list()}
    rows = _gateway_upstreams(sim_stack)
    assert {name: (row["container"], row["ready"]) for name, row in rows.items()} == {
        "baseline/1": (single.name, True),
        "mtp/1": (_container(docker_client, sim_stack.project, "mtp/1").name, True),
    }
    served = _served(sim_stack)  # both ready in the gateway's set; every request answered
    assert {status for status, _ in served} == {200} and {n for _, n in served} <= {"baseline/1", "mtp/1"}
    mtp = _container(docker_client, sim_stack.project, "mtp/1").id
    before = _ids(docker_client, sim_stack.project)
    plan = sim_stack.run("up", "baseline", "mtp-crash", "--dry-run", "--json")
    assert plan.returncode == 0, plan.stderr
    data = json.loads(plan.stdout)["plan"]
    ops = [op["op"] for op in data["operations"]]
    assert data["mode"] == "replace" and ops[:3] == ["Publish", "Drain", "Stop"], ops
    assert _ids(docker_client, sim_stack.project) == before

    failed, answers = _under_load(sim_stack, "baseline", "mtp-crash")  # needs mtp's GPUs: mtp stops first
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert {status for status, _ in answers} == {200}, answers
    rows = _gateway_upstreams(sim_stack)
    assert {name: row["ready"] for name, row in rows.items()} == {"baseline/1": True, "mtp/1": True}
    assert _container(docker_client, sim_stack.project, "mtp/1").id != mtp  # started again
    served = _served(sim_stack)
    assert {status for status, _ in served} == {200} and "mtp/1" in {name for _, name in served}, served

    # SIGTERM while the replacement starts: undone like a failure, exit 130, the lock free.
    swap, lines = _started(sim_stack, "up", "baseline", "mtp-hang", "--timeout", "60")
    lines.wait_for("starting mtp-hang/1", timeout=120)
    swap.send_signal(signal.SIGTERM)
    assert swap.wait(timeout=120) == 130, "".join(lines.seen)
    rows = _gateway_upstreams(sim_stack)
    assert {name: row["ready"] for name, row in rows.items()} == {"baseline/1": True, "mtp/1": True}
    again = sim_stack.run("up", "baseline", "mtp", "--no-wait", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["outcome"] == "unchanged", again.stderr

    # SIGKILL once the replacement runs: nothing is undone, so `status` names the interrupted
    # change and the next `up` finishes the set from what it finds (the lock is free).
    killed, lines = _started(sim_stack, "up", "baseline", "mtp-hang", "--timeout", "60")
    lines.wait_for("starting mtp-hang/1", timeout=120)
    hang = sim_stack.status_until(lambda s: "mtp-hang/1" in str(s.get("swap")), timeout=60)["swap"]
    assert hang["kind"] == "live" and hang["line"].startswith("changing the live set "), hang
    deadline = time.monotonic() + 60
    while _members(docker_client, sim_stack.project, "mtp-hang/1") == []:
        assert time.monotonic() < deadline, "compose made no mtp-hang/1 container in 60 s"
        threading.Event().wait(0.1)  # compose has made the container: its start is not half done
    killed.send_signal(signal.SIGKILL)
    assert killed.wait(timeout=30) == -signal.SIGKILL
    status = sim_stack.status(exits=(0, 1))
    assert status["swap"] is None, status["swap"]
    (warning,) = [w for w in status["warnings"] if "was interrupted" in w]
    assert "-> baseline+mtp-hang, was interrupted" in warning and "mtp-hang/1 " in warning, warning
    events = _events(sim_stack)
    assert (events[-1]["kind"], events[-1]["outcome"]) == ("live", "interrupted"), events[-1]
    finished = sim_stack.run("up", "baseline", "mtp", "--no-wait", timeout=300)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    rows = _gateway_upstreams(sim_stack)
    assert {name: row["ready"] for name, row in rows.items()} == {"baseline/1": True, "mtp/1": True}
    assert _members(docker_client, sim_stack.project, "mtp-hang/1") == []
    assert not [w for w in sim_stack.status()["warnings"] if "was interrupted" in w]

    kept = sim_stack.run("up", "baseline", "mtp-crash", "--no-rollback", timeout=300)
    assert kept.returncode == 1 and "rollback disabled" in kept.stderr, kept.stderr
    rows = _gateway_upstreams(sim_stack)  # mtp-crash/1 left in place for a look, out of the upstreams
    assert {name: row["routed"] for name, row in rows.items()} == {"baseline/1": True, "mtp-crash/1": False}


def test_up_one_variant_on_a_live_set_replaces_the_set_and_it_alone_serves(sim_stack, docker_client) -> None:
    """{baseline, mtp} live under a steady client; `up baseline --dry-run` says `replace` and
    changes nothing; `up baseline` leaves baseline's one serving container alone serving, no
    live member left, no failed request, one history line."""
    _live(sim_stack)
    assert sim_stack.run("up", "baseline", "mtp", timeout=300).returncode == 0
    assert sorted(_gateway_upstreams(sim_stack)) == ["baseline/1", "mtp/1"]
    before = _ids(docker_client, sim_stack.project)
    plan = sim_stack.run("up", "baseline", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "(replace; leaving: baseline/1, mtp/1)" in plan.stdout and "baseline serves alone" in plan.stdout
    data = json.loads(sim_stack.run("up", "baseline", "--dry-run", "--json").stdout)["plan"]
    assert (data["mode"], data["alone"], data["leaving"]) == ("replace", "baseline", ["baseline/1", "mtp/1"])
    assert _ids(docker_client, sim_stack.project) == before  # a dry run changes nothing

    events = len(_events(sim_stack))
    done, answers = _under_load(sim_stack, "baseline")
    assert done.returncode == 0, done.stdout + done.stderr
    assert {status for status, _ in answers} == {200}, answers  # none refused, none failed
    status = sim_stack.status()
    assert status["variant"] == "baseline" and status["live"] == [], status
    assert _members(docker_client, sim_stack.project, "baseline/1") == []
    assert _members(docker_client, sim_stack.project, "mtp/1") == []
    assert len(_events(sim_stack)) == events + 1
    served = _served(sim_stack)
    assert {status for status, _ in served} == {200}, served
    # the gateway was replaced from baseline's run file: restarted, it routes to baseline
    # alone, not to the members that left
    docker_client.containers.get(f"{sim_stack.project}-gateway-1").restart(timeout=10)
    assert _backend_ready_within(sim_stack, 60), "the restarted gateway found no ready upstream"
    served = _served(sim_stack)
    assert {status for status, _ in served} == {200}, served
    (single,) = running_containers(docker_client, sim_stack.project)
    again = sim_stack.run("up", "baseline", "--json")  # plain switching again: baseline is not restarted
    assert again.returncode == 0, again.stderr
    assert [c.id for c in running_containers(docker_client, sim_stack.project)] == [single.id]
