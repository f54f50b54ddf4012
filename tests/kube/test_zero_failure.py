"""The zero-failure switch on Kubernetes, against the recording kubectl and a real gateway:
streams in flight finish and new requests wait during the rollout; a failed or interrupted
rollout is undone under the same hold; two `up --target kubernetes` take turns."""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from composer.gateway.host.client import GatewayControl
from tests.conftest import free_port
from tests.gateway.fakes import GatewayThread, LocalExec, ThreadServer

from .conftest import KEY, SERVED, UNDONE, Standin

UP = ("--target", "kubernetes", "--timeout", "300")  # a budget a loaded machine does not run out of
# each test runs whole rollouts through the CLI, the kubectl stand-in and a real gateway
pytestmark = pytest.mark.slow


@dataclass
class Seen:
    """What the backend (the vLLM pod) saw, by prompt: arrival and finish times."""

    arrived: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)


def _app(seen: Seen) -> Starlette:
    def authorised(request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {KEY}"

    async def health(_: Request) -> Response:
        return Response(status_code=200)

    async def models(request: Request) -> Response:
        if not authorised(request):
            return JSONResponse({"error": "Unauthorized"}, 401)
        return JSONResponse({"object": "list", "data": [{"id": SERVED, "object": "model"}]})

    async def completions(request: Request) -> Response:
        if not authorised(request):
            return JSONResponse({"error": "Unauthorized"}, 401)
        body = await request.json()
        prompt = str(body.get("prompt"))
        seen.arrived.setdefault(prompt, time.time())
        if not body.get("stream"):
            seen.finished[prompt] = time.time()
            return JSONResponse({"choices": [{"index": 0, "text": " ok"}]})

        async def stream():
            for index in range(5):
                yield f'data: {{"choices": [{{"index": 0, "text": "{index}"}}]}}\n\n'.encode()
                while body.get("hold") and not seen.release.is_set():
                    await asyncio.sleep(0.01)
            seen.finished[prompt] = time.time()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/health", health),
            Route("/v1/models", models),
            Route("/v1/completions", completions, methods=["POST"]),
        ]
    )


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def gateway(seen: Seen) -> Iterator[GatewayThread]:
    """A real gateway in front of a backend that records what reached it and when."""
    backend = ThreadServer(_app(seen), free_port()).start()
    # the held test stream sends nothing, and the late request waits, while `up` runs, which a
    # loaded machine can make longer than the default stall_timeout (120 s) and hold_timeout
    server = GatewayThread(
        f"http://127.0.0.1:{backend.port}", api_key=KEY, stall_timeout=900, hold_timeout=900
    ).start()
    server.wait(lambda g: g.upstream.ready, timeout=30)
    yield server
    seen.release.set()
    server.stop()
    backend.stop()


def _wait(predicate, timeout: float = 180.0, what: str = "a condition") -> None:
    """Poll until true; the timeout only bounds a failing test (each step of `up` is a process
    start, which a loaded machine, e.g. `make check`'s 4 workers on 2 cores, makes slow)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _serve_baseline(standin: Standin, run_cli, gateway: GatewayThread, *flags: str, **scenario) -> None:
    standin.scenario(backends={v: f"127.0.0.1:{gateway.port}" for v in ("baseline", "mtp")}, **scenario)
    done = run_cli(*flags, "up", "baseline", *UP)
    assert done.returncode == 0, done.stderr
    standin.forget_calls()


def _state(gateway: GatewayThread):  # type: ignore[no-untyped-def]
    return GatewayControl(LocalExec(gateway.config.control_socket)).state()


def _holds(gateway: GatewayThread) -> int:
    return len(_state(gateway).holds)


def _call_time(standin: Standin, command: str) -> float:
    return next(
        c["t"] for c, name in zip(standin.calls(), standin.commands(), strict=True) if name == command
    )


def test_in_flight_streams_finish_and_new_requests_wait_through_the_rollout(
    standin: Standin, run_cli, gateway: GatewayThread, seen: Seen
) -> None:
    _serve_baseline(standin, run_cli, gateway)
    headers = {"Authorization": f"Bearer {KEY}"}
    chunks: list[str] = []
    late: list[httpx.Response] = []

    def stream() -> None:
        body = {"model": SERVED, "prompt": "in-flight", "stream": True, "hold": True}
        with (
            httpx.Client(timeout=600, trust_env=False) as http,
            http.stream("POST", f"{gateway.url}/v1/completions", json=body, headers=headers) as response,
        ):
            chunks.extend(line for line in response.iter_lines() if line)

    def request_late() -> None:
        with httpx.Client(timeout=600, trust_env=False) as http:
            body = {"model": SERVED, "prompt": "late"}
            late.append(http.post(f"{gateway.url}/v1/completions", json=body, headers=headers))

    streamer = threading.Thread(target=stream)
    streamer.start()
    _wait(lambda: "in-flight" in seen.arrived, what="the stream to reach the backend")
    up = run_cli("up", "mtp", *UP, "--json", popen=True)
    try:
        gate = gateway.gateway.gate  # read in this process: no control call per poll
        _wait(lambda: gate.backend_ready and not gate.is_open, what="the drain's hold")
        assert _holds(gateway) == 1
        latecomer = threading.Thread(target=request_late)
        latecomer.start()
        _wait(lambda: gate.held == 1, what="the new request to be held")
        # The drain waits for the stream: nothing is applied yet, and the new request waits.
        assert "apply --kustomize" not in standin.commands()
        assert "late" not in seen.arrived
        seen.release.set()
        out, err = up.communicate(timeout=600)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 0, err
    streamer.join(30)
    latecomer.join(30)
    assert chunks[-1] == "data: [DONE]" and len(chunks) == 6  # the stream was not cut
    assert late and late[0].status_code == 200
    applied = _call_time(standin, "apply --kustomize")
    assert seen.finished["in-flight"] < applied < seen.arrived["late"]
    # its backend sends no token ids: the stream cannot be continued (refused), and it drained
    assert json.loads(out)["drained"] == {"finished": 1, "cut": 0, "continued": 0, "refused": 1}
    commands = standin.commands()
    order = [
        "exec POST /drain",
        "apply --kustomize",
        "rollout status",
        "port-forward service/vllm",
        "exec POST /release",
    ]
    assert [c for c in commands if c in order] == order
    assert _holds(gateway) == 0
    assert KEY not in out + err


def test_a_failed_rollout_is_undone_under_the_hold(standin: Standin, run_cli, gateway: GatewayThread) -> None:
    _serve_baseline(standin, run_cli, gateway)
    standin.scenario(backends={"baseline": f"127.0.0.1:{gateway.port}"}, rollout={"mtp": "fail"})
    done = run_cli("up", "mtp", *UP)
    assert done.returncode == 1 and "rolled back to baseline" in done.stderr
    commands = standin.commands()
    drained, released = commands.index("exec POST /drain"), commands.index("exec POST /release")
    undo = commands.index("rollout undo")
    assert drained < commands.index("apply --kustomize") < undo < released
    assert commands[undo:released] == ["rollout undo", "rollout status", "port-forward service/vllm"]
    assert released == len(commands) - 1 and standin.serving() == "baseline" and _holds(gateway) == 0


def test_a_refused_apply_changes_nothing_and_undoes_nothing(
    standin: Standin, run_cli, gateway: GatewayThread
) -> None:
    _serve_baseline(standin, run_cli, gateway)
    standin.scenario(backends={"baseline": f"127.0.0.1:{gateway.port}"}, fail_apply=True)
    done = run_cli("up", "mtp", *UP)
    assert done.returncode == 1 and "admission webhook denied" in done.stderr
    assert "nothing was changed" in done.stderr
    commands = standin.commands()
    assert "rollout undo" not in commands and commands[-1] == "exec POST /release"
    assert standin.serving() == "baseline" and _holds(gateway) == 0


@pytest.mark.parametrize("moment", ["rollout status", "port-forward service/vllm"], ids=["rollout", "gate"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.usefixtures("default_sighup")  # `up` inherits it: an ignored SIGHUP stays ignored
def test_an_interrupted_rollout_is_undone_under_the_hold_then_exits_130(
    standin: Standin, run_cli, gateway: GatewayThread, sig: signal.Signals, moment: str
) -> None:
    """Interrupted while the rollout hangs, or while the gate polls a pod that never answers."""
    _serve_baseline(standin, run_cli, gateway)
    serves = f"127.0.0.1:{gateway.port}"
    hangs = {"rollout": {"mtp": "hang"}} if moment == "rollout status" else {}
    standin.scenario(backends={"baseline": serves, "mtp": f"127.0.0.1:{free_port()}"}, **hangs)
    # a budget that a loaded machine cannot spend before the signal: the rollout still hangs then
    up = run_cli("up", "mtp", "--target", "kubernetes", "--timeout", "600", popen=True)
    try:
        _wait(lambda: moment in standin.commands(), what=moment)
        time.sleep(0.5)
        up.send_signal(sig)
        _, err = up.communicate(timeout=600)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 130, err
    assert "interrupted" in err and "rolled back to baseline" in err and "Traceback" not in err
    commands = standin.commands()
    tail = commands[commands.index(moment) :]
    assert tail == [moment, *UNDONE]
    assert standin.serving() == "baseline" and _holds(gateway) == 0


def test_a_second_up_waits_for_the_first(
    standin: Standin, run_cli, gateway: GatewayThread, tmp_path: Path
) -> None:
    project = f"kl{secrets.token_hex(4)}"
    flags = ("--set", f"stack.project={project}")
    go = tmp_path / "rollout-may-finish"  # the first rollout lasts until the second one waits
    _serve_baseline(standin, run_cli, gateway, *flags, rollout={"mtp": f"until:{go}"})
    first = run_cli(*flags, "up", "mtp", *UP, popen=True)
    second = None
    second_err: list[str] = []
    waiting = threading.Event()

    def read_second_stderr() -> None:
        for line in second.stderr:  # type: ignore[union-attr]
            second_err.append(line)
            if "waiting for another swap" in line:
                waiting.set()

    try:
        _wait(lambda: "rollout status" in standin.commands(), what="the first rollout")
        second = run_cli(*flags, "up", "baseline", *UP, popen=True)
        reader = threading.Thread(target=read_second_stderr, daemon=True)
        reader.start()
        _wait(lambda: waiting.is_set() or second.poll() is not None, what="the second up to wait")
        go.touch()
        _, first_err = first.communicate(timeout=600)
        second.wait(timeout=600)
        reader.join(30)
    finally:
        go.touch()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert first.returncode == 0, first_err
    assert second.returncode == 0, "".join(second_err)
    assert any(f"waiting for another swap of project {project!r}" in line for line in second_err)
    calls = standin.calls()
    first_calls = [c["t"] for c in calls if c["pid"] == first.pid]
    second_calls = [c["t"] for c in calls if c["pid"] == second.pid]
    assert first_calls and second_calls and max(first_calls) < min(second_calls)
    assert standin.serving() == "baseline"


def test_a_changed_gateway_is_rolled_first_and_the_hold_stays_on_its_new_pod(
    standin: Standin, run_cli, gateway: GatewayThread
) -> None:
    _serve_baseline(standin, run_cli, gateway)
    done = run_cli("--set", "gateway.hold_timeout=120", "up", "mtp", *UP)
    assert done.returncode == 0, done.stderr
    assert "the gateway itself changes: rolling it first" in done.stderr
    commands = standin.commands()
    first = commands.index("apply --filename")
    assert commands[first : first + 2] == ["apply --filename", "rollout status"]
    assert standin.calls()[first + 1]["argv"][2] == "deployment/vllm-gateway"
    assert first < commands.index("exec POST /drain") < commands.index("apply --kustomize")
    # every control call went to the new gateway pod, not the one still terminating
    state = standin.state()
    labels = state["objects"]["deployment.apps/vllm-gateway"]["spec"]["template"]["metadata"]["labels"]
    new_pod = f"pod/vllm-gateway-{labels['vllm-composer.config-hash'][:10]}-q7x2k"
    assert set((standin.home / "exec-pods.log").read_text().split()) == {new_pod}
    assert _holds(gateway) == 0


def test_a_killed_switch_leaves_its_record_which_status_names_and_the_next_up_finishes(
    standin: Standin, run_cli, gateway: GatewayThread
) -> None:
    """The one-variant switch writes the running record a Docker switch writes: `status` shows
    it while it runs; killed with SIGKILL it becomes an interrupted event that `status` and
    `history` name; the next `up` finishes the switch."""
    _serve_baseline(standin, run_cli, gateway)
    serves = f"127.0.0.1:{gateway.port}"
    standin.scenario(backends={"baseline": serves, "mtp": serves}, rollout={"mtp": "hang"})
    up = run_cli("up", "mtp", "--target", "kubernetes", "--timeout", "600", popen=True)
    try:
        _wait(lambda: "rollout status" in standin.commands(), what="the rollout")
        running = run_cli("status", "--json")
        swap = json.loads(running.stdout)["swap"]
        assert (swap["kind"], swap["source"], swap["target"]) == ("up", "baseline", "mtp"), swap
        up.send_signal(signal.SIGKILL)
        up.wait(timeout=60)
    finally:
        if up.poll() is None:
            up.kill()
    status = json.loads(run_cli("status", "--json").stdout)
    assert status["swap"] is None, status
    (warning,) = [w for w in status["warnings"] if "was interrupted" in w]
    assert "baseline -> mtp" in warning, warning
    events = json.loads(run_cli("history", "--json").stdout)
    assert (events[-1]["kind"], events[-1]["target"], events[-1]["outcome"]) == ("up", "mtp", "interrupted")
    standin.scenario(backends={"baseline": serves, "mtp": serves})
    done = run_cli("up", "mtp", *UP)
    assert done.returncode == 0, done.stderr
    assert standin.serving() == "mtp"
    assert not [
        w for w in json.loads(run_cli("status", "--json").stdout)["warnings"] if "was interrupted" in w
    ]
