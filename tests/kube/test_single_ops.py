"""The one-variant switch on Kubernetes as typed operations run by the shared executor: its
plan and inverses, the undo of exactly what ran (the recorded kubectl calls mirrored),
`--no-rollback`, and the history line (a stop signal during the gate: test_zero_failure)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from composer.gateway.host.client import GatewayControl
from composer.kube.execute import plan_kube_single
from composer.kube.rollout import Serving
from composer.stack.load import load_stack
from composer.swap import ops
from tests.conftest import REPO
from tests.gateway.fakes import GatewayThread, LocalExec

from .conftest import Standin

pytestmark = pytest.mark.usefixtures("gateway")

UP = ("--target", "kubernetes", "--timeout", "300")


def _serve_baseline(standin: Standin, run_cli, gateway: GatewayThread, **scenario: object) -> None:
    standin.scenario(backends={"baseline": f"127.0.0.1:{gateway.port}"}, **scenario)
    done = run_cli("up", "baseline", *UP)
    assert done.returncode == 0, done.stderr
    standin.forget_calls()


def _fail_mtp(
    standin: Standin, run_cli, gateway: GatewayThread, *flags: str
) -> subprocess.CompletedProcess[str]:
    """Baseline serves; `up mtp` whose rollout fails."""
    _serve_baseline(standin, run_cli, gateway)
    standin.scenario(backends={"baseline": f"127.0.0.1:{gateway.port}"}, rollout={"mtp": "fail"})
    return run_cli("up", "mtp", *UP, *flags)


def _holds(gateway: GatewayThread) -> int:
    return len(GatewayControl(LocalExec(gateway.config.control_socket)).state().holds)


def _history(run_cli) -> list[dict]:
    done = run_cli("history", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_switch_is_a_plan_of_typed_operations_each_with_its_inverse() -> None:
    stack = load_stack([REPO / "composer.toml"], env_file=None, environ={})
    overlay = Path("/k/overlays/mtp")
    planned = plan_kube_single(
        stack, "mtp", overlay, "h2", Serving("baseline", "h1"), hold=True, gateway_file="/k/gw.yaml"
    ).ops
    assert [type(op).__name__ for op in planned] == [
        "UpdateGateway",
        "Hold",
        "Reapply",
        "Gate",
        "Release",
    ]
    roll = planned[2]
    assert isinstance(roll, ops.Reapply) and roll.recreate
    assert (roll.member.container, roll.member.run_file) == (stack.service, str(overlay))
    back = roll.inverse()  # the rollout undone, then what ran before gated again
    assert [type(op).__name__ for op in back] == ["RollBack", "Gate"]
    assert back[1].member.variant == "baseline" and back[1].member.container == stack.service
    assert planned[0].inverse() == () and planned[1].inverse() == () and planned[3].inverse() == ()
    assert "roll vllm to mtp" in roll.describe() and "drain those in flight" in planned[1].describe()
    assert '"op": "Reapply"' in json.dumps(roll.as_data()) and '"recreate": true' in json.dumps(
        roll.as_data()
    )

    # no Deployment yet, or the same configuration again: nothing to go back to, no hold
    first = plan_kube_single(stack, "mtp", overlay, "h2", None, hold=False).ops
    assert [type(op).__name__ for op in first] == ["Reapply", "Gate"] and first[0].inverse() == ()
    same = plan_kube_single(stack, "mtp", overlay, "h2", Serving("mtp", "h2"), hold=False).ops
    assert same[0].inverse() == ()


@pytest.mark.slow
def test_a_failed_rollout_is_undone_by_the_inverses_of_what_ran_newest_first(
    standin: Standin, run_cli, gateway: GatewayThread
) -> None:
    done = _fail_mtp(standin, run_cli, gateway, "--json")
    assert done.returncode == 1 and "rolled back to baseline" in done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["outcome"] == "rolled-back"
    commands = standin.commands()
    ran = commands[commands.index("exec POST /drain") : commands.index("logs deployment/vllm")]
    assert ran == ["exec POST /drain", "apply --kustomize", "rollout status"]
    # the Recreate rollout's inverse (undo, its rollout, the gate of baseline), then the hold's release
    assert commands[commands.index("logs deployment/vllm") + 1 :] == [
        "rollout undo",
        "rollout status",
        "port-forward service/vllm",
        "exec POST /release",
    ]
    assert standin.serving() == "baseline" and _holds(gateway) == 0
    event = _history(run_cli)[-1]
    assert (event["kind"], event["source"], event["target"], event["outcome"]) == (
        "up",
        "baseline",
        "mtp",
        "rolled back",
    )
    assert [step.split(" ")[0] for step in event["steps"]] == ["hold", "roll"]
    assert "exceeded its progress deadline" in event["cause"]


@pytest.mark.slow
def test_no_rollback_leaves_the_failed_revision_and_releases_the_hold(
    standin: Standin, run_cli, gateway: GatewayThread
) -> None:
    done = _fail_mtp(standin, run_cli, gateway, "--no-rollback")
    assert done.returncode == 1 and "not rolled back (--no-rollback)" in done.stderr
    commands = standin.commands()
    assert "rollout undo" not in commands and commands[-1] == "exec POST /release"
    assert standin.serving() == "mtp" and _holds(gateway) == 0
    assert _history(run_cli)[-1]["outcome"] == "failed"


def test_a_switch_writes_one_history_line_with_the_operations_it_ran(
    standin: Standin, run_cli, gateway: GatewayThread
) -> None:
    _serve_baseline(standin, run_cli, gateway)
    standin.scenario(backends={"baseline": f"127.0.0.1:{gateway.port}", "mtp": f"127.0.0.1:{gateway.port}"})
    done = run_cli("up", "mtp", *UP)
    assert done.returncode == 0, done.stderr
    events = _history(run_cli)
    assert [(e["source"], e["target"], e["outcome"]) for e in events] == [
        (None, "baseline", "started"),
        ("baseline", "mtp", "started"),
    ]
    steps = events[-1]["steps"]
    assert [s.split(" ")[0] for s in steps] == ["hold", "roll", "gate", "release"]
    assert events[-1]["drained"] == {"finished": 0, "cut": 0, "continued": 0, "refused": 0}
