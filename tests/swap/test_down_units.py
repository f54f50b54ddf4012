"""`down` planned from one snapshot (pure): drain at the gateway, each container stopped and
named once, then compose down; a project another stack started is refused unless --takeover
(`down`, `down --volumes`, `down VARIANT` and `status` read the same labels)."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from composer.errors import UsageError
from composer.render.spec import Owner
from composer.stack.keys import key_fingerprint
from composer.swap import down as down_module
from composer.swap.down import plan_down
from composer.swap.outcome import UpOptions
from composer.swap.owner import owner_status
from composer.swap.snapshot import LiveRunning, Snapshot
from composer.swap.transaction import Context
from tests.swap.test_plan_units import _info, _snap
from tests.swap.test_standby_units import _stack

MINE = "/home/me/mine/composer.toml"
THEIRS = "/home/you/demo/composer.toml"


def _owned_stack():
    return replace(_stack(), owner_file=MINE)


def _owner(stack, file: str = MINE, key: str | None = None) -> Owner:
    return Owner(file, stack.served_model_name, key_fingerprint(key if key is not None else stack.api_key))


def _live_set(stack, owner: Owner | None) -> Snapshot:
    """baseline/1 (the one serving container, adopted as it ran) and mtp/1, a live member."""
    baseline = replace(_info("baseline", service="vllm", sleep_mode=False), owner=owner)
    snap = _snap(stack, [baseline], route="http://vllm:8000")
    live = (
        LiveRunning("baseline/1", "baseline", baseline.name, "0,1", "h", "running", "vllm", owner),
        LiveRunning("mtp/1", "mtp", "p-vllm-mtp-1-1", "2,3", "h", "running", "vllm-mtp-1", owner),
    )
    return replace(snap, live=live, gateway=SimpleNamespace(status="running"))  # type: ignore[arg-type]


def test_down_of_a_live_set_drains_then_names_each_container_once() -> None:
    stack = _owned_stack()
    plan = plan_down(_live_set(stack, _owner(stack)), stack, 60, ("p_gateway-state",))
    assert not plan.refused and plan.before == ("baseline/1", "mtp/1") and plan.mode == "down"
    assert plan.describe().splitlines()[:5] == [
        "plan: {baseline/1, mtp/1} -> nothing (down; leaving: baseline/1, mtp/1)",
        "  1. Hold: hold new requests at the gateway and drain those in flight",
        "  2. Stop: stop baseline/1 (p-vllm-1)",
        "  3. Stop: stop mtp/1 (p-vllm-mtp-1-1)",
        "  4. StopProject: remove the gateway, its port holder and the network of project vllm (compose down); "
        "keep volume(s) p_gateway-state",
    ]
    assert "the drain waits up to 60s" in plan.describe() and "no stream continues" in plan.describe()
    data = plan.as_data()
    assert data["mode"] == "down" and [op["op"] for op in data["operations"]] == [
        "Hold",
        "Stop",
        "Stop",
        "StopProject",
    ]
    text = plan.describe()
    assert text.count("p-vllm-1") == 1 and "baseline (" not in text  # one name per container


def test_down_without_a_gateway_says_nothing_can_be_drained() -> None:
    stack = _owned_stack()
    snap = _snap(stack, [_info("mtp", service="vllm", sleep_mode=False)], route="http://vllm:8000")
    plan = plan_down(snap, stack, 5)
    assert [type(op).__name__ for op in plan.ops] == ["Stop", "StopProject"]
    assert any("cannot be drained" in note for note in plan.notes)


@pytest.mark.parametrize(
    ("theirs", "said"),
    [
        (lambda s: _owner(s, THEIRS), f"was started by another stack, {THEIRS} (project vllm)"),
        (lambda s: _owner(s, key="sk-" + "b2" * 24), "was started by this stack file"),
    ],
)
@pytest.mark.parametrize("volumes", [False, True])
def test_down_refuses_a_project_another_stack_started_unless_takeover(
    theirs, said: str, volumes: bool
) -> None:
    stack = _owned_stack()
    snap = _live_set(stack, theirs(stack))
    plan = plan_down(snap, stack, 60, ("p_gateway-state",), remove_volumes=volumes)
    command = "down --volumes" if volumes else "down"
    assert plan.refused and plan.ops == () and said in plan.refused
    assert f"`{command}` here would stop what that stack serves" in plan.refused
    assert "--takeover" in plan.refused and plan.describe().startswith("refused: ")
    taken = plan_down(snap, stack, 60, ("p_gateway-state",), remove_volumes=volumes, takeover=True)
    assert not taken.refused and any(n.startswith("takes over: baseline/1") for n in taken.notes)


def test_down_variant_refuses_another_stacks_project(monkeypatch: pytest.MonkeyPatch) -> None:
    stack = _owned_stack()
    snap = _live_set(stack, _owner(stack, THEIRS))
    monkeypatch.setattr(down_module, "take", lambda stack, client: snap)
    removed: list[str] = []
    monkeypatch.setattr(down_module, "_leave_live_set", lambda ctx, v, s: removed.append(v) or "ok")
    ctx = Context(stack, None, UpOptions())  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"`down mtp` here would stop") as refused:
        down_module.stop_variant(ctx, "mtp")
    assert refused.value.exit_code == 2 and THEIRS in str(refused.value) and removed == []
    assert down_module.stop_variant(ctx, "mtp", takeover=True) == "ok" and removed == ["mtp"]


def test_status_names_the_owning_stack_and_a_key_mismatch() -> None:
    stack = _owned_stack()
    assert owner_status(_live_set(stack, _owner(stack)), stack) is None
    assert owner_status(_live_set(stack, None), stack) is None  # nothing recorded: nothing to say
    other = owner_status(_live_set(stack, _owner(stack, THEIRS, key="sk-" + "c3" * 24)), stack)
    assert other is not None and other["stack_file"] == THEIRS and other["key_mismatch"] is True
    assert f"compose-spec -f {THEIRS} status" in str(other["line"])
    same_key = owner_status(_live_set(stack, _owner(stack, THEIRS)), stack)
    assert same_key is not None and same_key["key_mismatch"] is False


def test_status_exits_1_on_a_key_mismatch_and_names_the_owner(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from composer.cli import main
    from composer.cli.base import Context as CliContext
    from composer.swap import status as status_module
    from tests.conftest import REPO

    stack = _owned_stack()
    snap = _live_set(stack, _owner(stack, THEIRS, key="sk-" + "c3" * 24))
    monkeypatch.setattr(CliContext, "docker", lambda self, **kw: None)
    monkeypatch.setattr(status_module.snapshot, "take", lambda *a, **kw: snap)
    monkeypatch.setattr(
        status_module, "_serving_status", lambda *a: {"running": True, "health": "unauthorized"}
    )
    monkeypatch.setattr(status_module, "live_rows", lambda snap: [])
    monkeypatch.setattr(status_module, "gateway_status", lambda stack, snap: None)
    args = ["--env-file", str(REPO / ".env.demo"), "--stack", str(REPO / "composer.toml"), "status", "--json"]
    done = CliRunner().invoke(main, args, env={"VLLM_API_KEY": None}, catch_exceptions=False)
    assert done.exit_code == 1, done.output
    data = json.loads(done.stdout)
    assert data["owner"]["stack_file"] == THEIRS and data["owner"]["key_mismatch"] is True
    assert data["key_mismatch"] is True
    assert THEIRS in data["health_detail"] and any(THEIRS in w for w in data["warnings"])
    assert not any("compose-spec up" in w for w in data["warnings"])


def test_restart_brings_back_what_serves_through_up_force_recreate(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from composer.cli import main
    from composer.cli.base import Context as CliContext
    from composer.errors import DownRefused
    from composer.swap import entry
    from composer.swap.down import restart_target
    from tests.conftest import REPO

    stack = _stack()
    serving = _snap(stack, [_info("mtp", service="vllm", sleep_mode=False)], route="http://vllm:8000")
    monkeypatch.setattr(down_module, "take", lambda *a, **kw: serving)
    assert restart_target(stack, None, None) == "mtp" == restart_target(stack, None, "mtp")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"baseline does not serve \(mtp does\).*`compose-spec up baseline`"):
        restart_target(stack, None, "baseline")  # type: ignore[arg-type]
    monkeypatch.setattr(down_module, "take", lambda *a, **kw: _live_set(stack, None))
    with pytest.raises(UsageError, match=r"a live set runs \(baseline/1, mtp/1\)"):
        restart_target(stack, None)  # type: ignore[arg-type]
    monkeypatch.setattr(down_module, "take", lambda *a, **kw: Snapshot("p", ()))
    with pytest.raises(DownRefused, match="nothing serves") as nothing:
        restart_target(stack, None)  # type: ignore[arg-type]
    assert nothing.value.exit_code == 1

    seen: dict[str, object] = {}
    monkeypatch.setattr(down_module, "take", lambda *a, **kw: serving)
    monkeypatch.setattr(CliContext, "docker", lambda self, **kw: None)

    def up_set(stack, variants, *, client, options, progress, waiting):
        seen.update(variants=tuple(variants), force_recreate=options.force_recreate, dry_run=options.dry_run)
        return entry.UpResult(variant="mtp", outcome="planned", plan_text="plan: mtp -> mtp")

    monkeypatch.setattr(entry, "up_set", up_set)
    args = [
        "--env-file",
        str(REPO / ".env.demo"),
        "--stack",
        str(REPO / "composer.toml"),
        "restart",
        "--dry-run",
    ]
    key = {"VLLM_API_KEY": "sk-Qm7vX2pL9tR4wZ8nB3cF6hJ1kD5sG0yA"}
    done = CliRunner().invoke(main, args, env=key, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert seen == {"variants": ("mtp",), "force_recreate": True, "dry_run": True}
    assert "  --force-recreate" not in CliRunner().invoke(main, ["restart", "--help"]).stdout


def test_status_text_names_the_owner_instead_of_advising_the_refused_up() -> None:
    from composer.swap.status import format_status
    from tests.swap.test_everyday_units import RUNNING

    owner = {
        "stack_file": THEIRS,
        "key_mismatch": True,
        "line": f"mtp ... was started by another stack, {THEIRS}",
    }
    data = {
        **RUNNING,
        "matches_stack": False,
        "health": "unauthorized",
        "health_detail": f"401: it serves with the API key of {THEIRS}, not this stack's",
        "owner": owner,
        "warnings": [owner["line"]],
    }
    text = format_status(data)
    assert f"owner         {THEIRS} (another stack: see the warning)" in text
    assert f"health        401: it serves with the API key of {THEIRS}" in text
    assert "compose-spec up" not in text and f"warning       {owner['line']}" in text
