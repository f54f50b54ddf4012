"""The kubectl stand-in on PATH, a simulator behind its port-forward, and the CLI to drive them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import COMPOSE_SPEC, REPO
from tests.gateway.fakes import GatewayThread
from tests.sim.simproc import SimProcess

STANDIN = Path(__file__).resolve().parent / "standin.py"
KEY = "sk-kube-test-Jr4uW3dfZ7SWrbnsSTPMvSct"
SERVED = "claude-opus-5"  # composer.toml's served name
SWITCH_OPENING = [
    "get deployments",
    "apply --server-side",
    "get secret/vllm-api-key",
    "get deployment/vllm-gateway",
    "get pods",
    "exec GET /state",
    "exec POST /drain",
    "apply --kustomize",
    "rollout status",
]
"""What a switch asks kubectl up to the new variant's rollout: the Deployments, the stack-wide
objects, the key, the gateway and its state, the drain, then the apply and the rollout."""
UNDONE = [
    "logs deployment/vllm",
    "rollout undo",
    "rollout status",
    "port-forward service/vllm",
    "exec POST /release",
]
"""What follows a failed rollout: its pod's log, the undo, the previous variant's rollout and
gate, then the hold's release."""
MODEL = str(REPO / "images" / "sim" / "models" / "Qwen3.8-27B")


@dataclass
class Standin:
    """A recording kubectl: `bin` holds the `kubectl` wrapper, `home` its scenario and state."""

    bin: Path
    home: Path
    defaults: dict | None = None

    def scenario(self, **values: object) -> None:
        """What the cluster does; the gateway pod's control socket is the test gateway's."""
        (self.home / "scenario.json").write_text(json.dumps({**(self.defaults or {}), **values}))

    def calls(self) -> list[dict]:
        path = self.home / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def commands(self, calls: list[dict] | None = None) -> list[str]:
        """Each call as `verb noun` (e.g. `rollout undo`; `exec METHOD PATH` for the gateway's
        control tool), global flags left out, for checking the order."""
        out = []
        for call in self.calls() if calls is None else calls:
            argv = list(call["argv"])
            while argv[:1] in (["--namespace"], ["--context"]):
                argv = argv[2:]
            if argv[0] == "exec":
                start = argv.index("--") + 4  # after `python3 -m composer.gateway.ctl`
                out.append(f"exec {argv[start]} {argv[start + 1]}")
            else:
                out.append(" ".join(argv[:2]))
        return out

    def state(self) -> dict:
        path = self.home / "state.json"
        return json.loads(path.read_text()) if path.exists() else {"history": [], "objects": {}}

    def serving(self) -> str | None:
        history = self.state()["history"]
        return history[-1]["labels"]["vllm-composer.variant"] if history else None

    def forget_calls(self) -> None:
        (self.home / "calls.jsonl").unlink(missing_ok=True)


def install_standin(bin_dir: Path, home: Path) -> Standin:
    bin_dir.mkdir()
    home.mkdir()
    wrapper = bin_dir / "kubectl"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    wrapper.chmod(0o755)
    return Standin(bin_dir, home)


@pytest.fixture
def standin(tmp_path: Path, request: pytest.FixtureRequest) -> Standin:
    made = install_standin(tmp_path / "bin", tmp_path / "cluster")
    if "gateway" in request.fixturenames:
        made.defaults = {"gateway_socket": request.getfixturevalue("gateway").config.control_socket}
    return made


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """A simulator serving the stack's name: the vLLM pod behind the variant Service."""
    server = SimProcess.start(
        [MODEL, "--served-model-name", SERVED], api_key=KEY, log_dir=tmp_path_factory.mktemp("sim")
    )
    yield server.wait_ready()
    server.stop()


@pytest.fixture(scope="module")
def gateway(backend: SimProcess) -> Iterator[GatewayThread]:
    """The real gateway in front of it: the gateway pod behind the shared Service, its control
    socket reached by the stand-in's `kubectl exec`."""
    server = GatewayThread(f"http://127.0.0.1:{backend.port}", api_key=KEY).start()
    server.wait(lambda g: g.upstream.ready, timeout=30)
    yield server
    server.stop()


@pytest.fixture
def run_cli(standin: Standin, tmp_path: Path):
    """Run compose-spec with the stand-in first on PATH, the API key in the environment; one
    started in the background gets a session of its own, ended with the test (a SIGKILLed `up`
    leaves its kubectl running, as it would anywhere)."""
    env_file = tmp_path / "empty.env"
    env_file.write_text("")
    started: list[subprocess.Popen] = []

    def run(
        *args: str, extra_env: dict[str, str] | None = None, path_first: bool = True, popen: bool = False
    ):
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("KUBE", "VLLM_", "SIM_", "GATEWAY_")) and k not in {"COMPOSER_STACK"}
        }
        env["PATH"] = f"{standin.bin}:{env['PATH']}" if path_first else env["PATH"]
        env |= {
            "KUBECTL_STANDIN_DIR": str(standin.home),
            "VLLM_API_KEY": KEY,
            "XDG_STATE_HOME": str(tmp_path / "state"),
            # the test's own swap locks: the user's lock of project vllm is one per machine,
            # held by whatever else runs `up` there (another test, another checkout's suite)
            "VLLM_COMPOSER_LOCK_DIR": str(tmp_path / "locks"),
        }
        env |= extra_env or {}
        if popen:
            started.append(
                subprocess.Popen(
                    [*COMPOSE_SPEC, "--env-file", str(env_file), *args],
                    cwd=REPO,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,
                )
            )
            return started[-1]
        return subprocess.run(
            [*COMPOSE_SPEC, "--env-file", str(env_file), *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,  # bounds only a hung run: on a loaded machine each kubectl call is slow
            check=False,
        )

    yield run
    for proc in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
