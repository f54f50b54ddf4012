"""`compose-spec up VARIANT --target kubernetes` against the recording kubectl stand-in:
a rollout that succeeds, one that fails and is undone, one that times out and is undone,
a gate failure through the Service, and the edges (no history, URL, namespace, no kubectl)."""

from __future__ import annotations

import base64
import json
import secrets
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.gateway.fakes import GatewayThread
from tests.sim.simproc import SimProcess

from .conftest import KEY, MODEL, SWITCH_OPENING, UNDONE, Standin

pytestmark = pytest.mark.usefixtures("gateway")

UP = ("up", "--target", "kubernetes", "--timeout", "20")
FAILURE_LOG = "INFO loading weights\nRuntimeError: UVA is not available on this platform\n"


def _addr(server: SimProcess | GatewayThread) -> str:
    return f"127.0.0.1:{server.port}"


def _serve_baseline(standin: Standin, run_cli, gateway: GatewayThread) -> None:
    standin.scenario(backends={"baseline": _addr(gateway), "mtp": _addr(gateway)})
    done = run_cli(*UP[:1], "baseline", *UP[1:])
    assert done.returncode == 0, done.stderr
    assert standin.serving() == "baseline"
    standin.forget_calls()


def test_a_successful_rollout_applies_waits_and_gates_through_the_service(
    standin: Standin, run_cli, gateway: GatewayThread, tmp_path: Path
) -> None:
    standin.scenario(backends={"baseline": _addr(gateway), "mtp": _addr(gateway)})
    first = run_cli("up", "baseline", *UP[1:])
    assert first.returncode == 0, first.stderr
    assert "baseline: started on Kubernetes" in first.stdout
    standin.forget_calls()

    done = run_cli("up", "mtp", *UP[1:])
    assert done.returncode == 0, done.stderr
    assert "mtp: started on Kubernetes" in done.stdout
    assert standin.serving() == "mtp"
    commands = standin.commands()
    assert commands == [
        *SWITCH_OPENING,
        "port-forward service/vllm",
        "exec POST /release",
    ]
    calls = standin.calls()
    assert calls[8]["argv"] == ["rollout", "status", "deployment/vllm", "--timeout=20s"]
    assert calls[9]["argv"] == ["port-forward", "service/vllm", ":8000"]
    # The key reaches the cluster on stdin only, as the Secret's data (server-side applied).
    secret = json.loads(calls[1]["stdin"])
    assert secret["kind"] == "Secret" and secret["data"] == {
        "VLLM_API_KEY": base64.b64encode(KEY.encode()).decode()
    }
    assert all(KEY not in " ".join(c["argv"]) for c in calls)
    assert KEY not in done.stdout + done.stderr
    # What was applied is exactly the committed overlay (no .env here), key-free on disk.
    overlay = Path(calls[7]["argv"][2])
    assert overlay.name == "mtp" and overlay.is_relative_to(tmp_path / "state")
    committed = REPO / "kubernetes" / "overlays" / "mtp"
    assert (overlay / "deployment.yaml").read_text() == (committed / "deployment.yaml").read_text()
    for path in overlay.parent.parent.rglob("*.yaml"):
        assert KEY not in path.read_text()

    again = run_cli("up", "mtp", *UP[1:], "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["outcome"] == "unchanged"


@pytest.mark.slow
def test_a_failed_rollout_is_undone_and_the_previous_variant_gated(
    standin: Standin, run_cli, gateway: GatewayThread
) -> None:
    _serve_baseline(standin, run_cli, gateway)
    standin.scenario(
        backends={"baseline": _addr(gateway)}, rollout={"mtp": "fail"}, logs={"mtp": FAILURE_LOG}
    )
    done = run_cli("up", "mtp", *UP[1:])
    assert done.returncode == 1
    assert "exceeded its progress deadline" in done.stderr
    assert "rolled back to baseline" in done.stderr
    assert "UVA is not available" in done.stderr and "hint: " in done.stderr  # the pod's log and its fix
    assert "Traceback" not in done.stderr
    # the undo and the previous variant's gate run under the same hold, released last
    assert standin.commands() == [*SWITCH_OPENING, *UNDONE]
    assert standin.serving() == "baseline"


@pytest.mark.slow
def test_a_rollout_that_times_out_is_undone(standin: Standin, run_cli, gateway: GatewayThread) -> None:
    _serve_baseline(standin, run_cli, gateway)
    standin.scenario(backends={"baseline": _addr(gateway)}, rollout={"mtp": "timeout"})
    began = time.monotonic()
    done = run_cli("up", "mtp", "--target", "kubernetes", "--timeout", "2", "--json")
    assert done.returncode == 1
    assert time.monotonic() - began >= 2  # kubectl waited the whole --timeout
    assert "timed out waiting for the condition" in done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["outcome"] == "rolled-back"
    statuses = [c["argv"] for c in standin.calls() if c["argv"][:2] == ["rollout", "status"]]
    assert statuses[0][-1] == "--timeout=2s"
    assert "rollout undo" in standin.commands()
    assert standin.serving() == "baseline"


@pytest.mark.slow
def test_a_gate_failure_through_the_service_is_undone(
    standin: Standin, run_cli, gateway: GatewayThread, tmp_path: Path
) -> None:
    _serve_baseline(standin, run_cli, gateway)
    wrong = SimProcess.start([MODEL, "--served-model-name", "other-name"], api_key=KEY, log_dir=tmp_path)
    try:
        wrong.wait_ready()
        standin.scenario(backends={"baseline": _addr(gateway), "mtp": _addr(wrong)})
        done = run_cli("up", "mtp", *UP[1:])
    finally:
        wrong.stop()
    assert done.returncode == 1
    assert "not the expected name 'claude-opus-5'" in done.stderr
    assert "rolled back to baseline" in done.stderr
    assert standin.commands().count("port-forward service/vllm") == 2
    assert standin.serving() == "baseline"


def test_without_an_earlier_revision_nothing_is_undone(standin: Standin, run_cli) -> None:
    standin.scenario(rollout={"mtp": "fail"})
    done = run_cli("up", "mtp", *UP[1:], "--no-rollback")
    assert done.returncode == 1
    assert "not rolled back" in done.stderr
    assert "rollout undo" not in standin.commands()
    standin.forget_calls()
    done = run_cli("up", "mtp", *UP[1:])
    assert done.returncode == 1 and "no earlier revision" in done.stderr
    assert "rollout undo" not in standin.commands()


def test_service_url_namespace_and_kubectl_from_the_stack(
    standin: Standin, run_cli, gateway: GatewayThread
) -> None:
    standin.scenario(backends={})  # a port-forward would fail: the URL must be used
    done = run_cli(
        "--set",
        f"kubernetes.service_url=http://{_addr(gateway)}/",
        "--set",
        "kubernetes.namespace=llm",
        "up",
        "baseline",
        *UP[1:],
        extra_env={"KUBECTL": str(standin.bin / "kubectl")},
        path_first=False,
    )
    assert done.returncode == 0, done.stderr
    calls = standin.calls()
    assert calls and all(c["namespace"] == "llm" for c in calls)
    assert "port-forward service/vllm" not in standin.commands()


@pytest.mark.parametrize(
    ("args", "env", "message", "code"),
    [
        ((), {"KUBECTL": "/nonexistent/kubectl"}, "is not on PATH", 1),
        (("--set", "kubernetes.service_url=ftp://x"), {}, "kubernetes.service_url", 2),
        ((), {"VLLM_API_KEY": ""}, "VLLM_API_KEY is not set", 1),
    ],
)
def test_errors_are_one_line(standin: Standin, run_cli, args, env, message: str, code: int) -> None:
    standin.scenario()
    # a project of its own: the user's swap lock of project vllm may be held by a test beside it
    own = {"COMPOSE_PROJECT_NAME": f"kt{secrets.token_hex(4)}"}
    done = run_cli(*args, "up", "baseline", *UP[1:], extra_env={**own, **env})
    assert done.returncode == code, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
