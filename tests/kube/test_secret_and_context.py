"""The API key on the Kubernetes path (server-side applied, no last-applied annotation, never
in kubectl's messages), the kube context and kubeconfig, an unreachable cluster's fix line,
and the stand-in refusing what the real kubectl refuses."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gateway.fakes import GatewayThread

from .conftest import KEY, STANDIN, Standin

pytestmark = pytest.mark.usefixtures("gateway")
UP = ("up", "baseline", "--target", "kubernetes", "--timeout", "20")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
ENCODED = base64.b64encode(KEY.encode()).decode()


def _scenario(standin: Standin, gateway: GatewayThread, **values: object) -> None:
    standin.scenario(backends={"baseline": f"127.0.0.1:{gateway.port}"}, **values)


def _secret(standin: Standin) -> dict:
    return standin.state()["objects"]["secret/vllm-api-key"]


def test_the_secret_is_server_side_applied_without_a_last_applied_annotation(
    standin: Standin, run_cli, gateway: GatewayThread
) -> None:
    _scenario(standin, gateway)
    done = run_cli(*UP)
    assert done.returncode == 0, done.stderr
    apply = next(c for c in standin.calls() if c["stdin"])
    assert apply["argv"][:4] == [
        "apply",
        "--server-side",
        "--field-manager=compose-spec",
        "--force-conflicts",
    ]
    sent = json.loads(apply["stdin"])
    assert "stringData" not in sent and sent["data"] == {"VLLM_API_KEY": ENCODED}
    stored = _secret(standin)
    assert LAST_APPLIED not in stored["metadata"]["annotations"]
    assert KEY not in json.dumps(stored["metadata"]) and ENCODED not in json.dumps(stored["metadata"])
    # The control: the same object applied client-side keeps the key in that annotation.
    client_side = subprocess.run(
        [str(standin.bin / "kubectl"), "apply", "--filename", "-"],
        input=apply["stdin"],
        capture_output=True,
        text=True,
        env={"KUBECTL_STANDIN_DIR": str(standin.home), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert "secret/vllm-api-key configured" in client_side.stdout
    assert ENCODED in _secret(standin)["metadata"]["annotations"][LAST_APPLIED]


def test_an_annotation_left_by_a_client_side_apply_is_removed(
    standin: Standin, run_cli, gateway: GatewayThread
) -> None:
    leaked = {"metadata": {"name": "vllm-api-key"}, "stringData": {"VLLM_API_KEY": KEY}}
    old = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "vllm-api-key", "annotations": {LAST_APPLIED: json.dumps(leaked)}},
    }
    (standin.home / "state.json").write_text(
        json.dumps({"history": [], "objects": {"secret/vllm-api-key": old}})
    )
    _scenario(standin, gateway)
    done = run_cli(*UP)
    assert done.returncode == 0, done.stderr
    assert "annotate secret/vllm-api-key" in standin.commands()
    annotate = next(c for c in standin.calls() if c["argv"][0] == "annotate")
    assert annotate["argv"] == ["annotate", "secret/vllm-api-key", f"{LAST_APPLIED}-"]
    assert LAST_APPLIED not in _secret(standin)["metadata"]["annotations"]


def test_a_failing_apply_prints_no_key(standin: Standin, run_cli, gateway: GatewayThread) -> None:
    _scenario(standin, gateway, fail_secret=True)
    done = run_cli(*UP)
    assert done.returncode == 1
    assert "secrets is forbidden" in done.stderr and "********" in done.stderr
    for text in (done.stdout, done.stderr):
        assert KEY not in text and ENCODED not in text and ENCODED.rstrip("=") not in text
    json_done = run_cli(*UP, "--json")
    assert json_done.returncode == 1 and KEY not in json_done.stdout and ENCODED not in json_done.stdout
    assert json.loads(json_done.stdout)["kind"] == "kubernetes"


def test_kube_context_reaches_kubectl_as_context(standin: Standin, run_cli, gateway: GatewayThread) -> None:
    _scenario(standin, gateway, contexts=["gpu-prod", "from-env"])
    done = run_cli(*UP, "--kube-context", "gpu-prod")
    assert done.returncode == 0, done.stderr
    calls = standin.calls()
    assert calls and all(c["argv"][:2] == ["--context", "gpu-prod"] for c in calls)
    standin.forget_calls()
    done = run_cli(*UP, extra_env={"KUBE_CONTEXT": "from-env"})
    assert done.returncode == 0, done.stderr
    assert {c["context"] for c in standin.calls()} == {"from-env"}


def test_kubeconfig_reaches_kubectl(
    standin: Standin, run_cli, gateway: GatewayThread, tmp_path: Path
) -> None:
    _scenario(standin, gateway)
    wrapper = standin.bin / "kubectl"
    wrapper.write_text(
        f'#!/bin/sh\necho "$KUBECONFIG" >> "{standin.home}/kubeconfigs"\nexec "{sys.executable}" "{STANDIN}" "$@"\n'
    )
    done = run_cli("--set", f"kubernetes.kubeconfig={tmp_path}/a:{tmp_path}/b", *UP)
    assert done.returncode == 0, done.stderr
    seen = set((standin.home / "kubeconfigs").read_text().split())
    assert seen == {f"{tmp_path}/a:{tmp_path}/b"}


@pytest.mark.parametrize(
    ("args", "scenario", "message", "code"),
    [
        (("--context", "desktop-linux"), {}, "--context names a Docker context; with --target kubernetes", 2),
        (("--kube-context", "nowhere"), {"contexts": []}, 'context "nowhere" does not exist', 1),
        ((), {"unreachable": True}, "The connection to the server 127.0.0.1:6443 was refused", 1),
    ],
    ids=["docker-context", "unknown-context", "unreachable"],
)
def test_cluster_errors_are_one_line_ending_with_the_fix(
    standin: Standin, run_cli, gateway: GatewayThread, args, scenario, message: str, code: int
) -> None:
    _scenario(standin, gateway, **scenario)
    global_args = args if args[:1] == ("--context",) else ()
    local_args = () if global_args else args
    # a project of its own: the user's swap lock of project vllm may be held by a test beside it
    own = {"COMPOSE_PROJECT_NAME": f"kt{secrets.token_hex(4)}"}
    done = run_cli(*global_args, *UP, *local_args, extra_env=own)
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in done.stderr
    if code == 1:
        assert lines[0].endswith("or point KUBECONFIG at its kubeconfig")
        assert "fix: `kubectl config current-context`" in lines[0]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["apply", "--bogus", "--filename", "-"], "error: unknown flag: --bogus"),
        (
            ["apply", "--force-conflicts", "--filename", "-"],
            "--force-conflicts only works with --server-side",
        ),
        (["apply", "--filename", "-", "--kustomize", "x"], "only one of -f or -k"),
        (
            ["rollout", "status", "service/vllm", "--timeout=1s"],
            'no status viewer has been implemented for "service"',
        ),
        (["rollout", "undo", "deployment/vllm", "--to-revision"], "flag needs an argument: --to-revision"),
        (["get", "deploymnt/vllm"], 'the server doesn\'t have a resource type "deploymnt"'),
        (["exec", "deployment/vllm-gateway", "python3"], "you must specify at least one command"),
        (["logs", "deployment/vllm", "--tail=5", "--since-time=x"], "unknown flag: --since-time"),
        (["scale", "deployment/vllm"], 'unknown command "scale"'),
    ],
)
def test_the_standin_refuses_what_kubectl_refuses(standin: Standin, argv: list[str], said: str) -> None:
    standin.scenario()
    done = subprocess.run(
        [str(standin.bin / "kubectl"), *argv],
        input="{}",
        capture_output=True,
        text=True,
        env={"KUBECTL_STANDIN_DIR": str(standin.home), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 1 and said in done.stderr, done.stderr
