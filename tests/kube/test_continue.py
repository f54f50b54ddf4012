"""A switch on Kubernetes waits for no eligible stream: `up mtp --target kubernetes` pauses
the greedy stream in flight at the drain, rolls out, and the stream goes on after the gate,
token for token (the recording kubectl, a real gateway, the simulator as the vLLM pod)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.gateway.fakes import GatewayThread
from tests.gateway.livelab import Client, body, check_continued, references
from tests.sim.simproc import SimProcess

from .conftest import KEY, MODEL, SERVED, Standin

UP = ("--target", "kubernetes", "--timeout", "300")
COMPLETIONS = "/v1/completions"
pytestmark = pytest.mark.slow


@pytest.fixture
def slow_backend(tmp_path: Path) -> Iterator[SimProcess]:
    """The simulator at the reference box's own rate: a stream of 320 tokens lasts ~11 s."""
    sim = SimProcess.start(
        [MODEL, "--served-model-name", SERVED], env={"SIM_TIME_SCALE": "1"}, api_key=KEY, log_dir=tmp_path
    )
    yield sim.wait_ready()
    sim.stop()


@pytest.fixture
def gateway(slow_backend: SimProcess) -> Iterator[GatewayThread]:
    server = GatewayThread(f"http://127.0.0.1:{slow_backend.port}", api_key=KEY, served_name=SERVED).start()
    server.wait(lambda g: g.upstream.ready, timeout=30)
    yield server
    server.stop()


@pytest.mark.parametrize("drain", [False, True])
def test_a_stream_in_flight_goes_on_after_the_rollout_token_for_token(
    standin: Standin, run_cli, gateway: GatewayThread, slow_backend: SimProcess, drain: bool
) -> None:
    standin.scenario(backends={v: f"127.0.0.1:{gateway.port}" for v in ("baseline", "mtp")})
    done = run_cli("up", "baseline", *UP)
    assert done.returncode == 0, done.stderr
    standin.forget_calls()
    request = body(0, False, model=SERVED)
    pool = ThreadPoolExecutor(1)  # the uninterrupted run, on the simulator, meanwhile
    refs = pool.submit(references, slow_backend.port, COMPLETIONS, [request], KEY)
    client = Client(gateway.port, COMPLETIONS, request, KEY).start()
    client.wait_events(5)
    flags = ("--drain",) if drain else ()
    done = run_cli("up", "mtp", *UP, *flags, "--json")
    assert done.returncode == 0, done.stderr
    drained = json.loads(done.stdout.splitlines()[-1])["drained"]
    (ref,) = refs.result()
    pool.shutdown()
    if drain:  # `up --drain`: the drain waited for the stream, which finished on baseline
        assert drained == {"finished": 1, "cut": 0, "continued": 0, "refused": 0}
    else:  # paused at the drain, then on after the release
        assert drained == {"finished": 0, "cut": 0, "continued": 1, "refused": 0}
    check_continued(client.join(), ref)  # one stream, the uninterrupted tokens, either way
    commands = standin.commands()
    assert commands.index("exec POST /drain") < commands.index("apply --kustomize")
