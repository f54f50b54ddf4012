"""`up`'s desired set and its mode (pure): {X} exclusive, {A, B} side by side, `up` alone the
stack's `[gateway] live`; and the plan of {X} replacing a running live set (`plan_alone`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from composer.errors import ConfigError, UsageError
from composer.render.live import resolve_live
from composer.render.target import resolve_target
from composer.stack.load import load_stack
from composer.stack.model import Stack
from composer.swap.desired import EXCLUSIVE, SIDE_BY_SIDE, Desired, desired
from composer.swap.ops import Gate, Hold, Member, Start, Stop
from composer.swap.plan import Plan, plan_alone, plan_live
from composer.swap.snapshot import LiveRunning, Snapshot
from tests.conftest import REPO
from tests.swap.test_live_plan import LIVE, _ops, _running


def _stack(tmp_path: Path, text: str = LIVE) -> Stack:
    extra = tmp_path / "live.toml"
    extra.write_text(text, encoding="utf-8")
    return load_stack([REPO / "composer.toml", extra], None, environ={})


def _snap(*live: LiveRunning) -> list[str]:
    """The live members a snapshot with `live` says serve (a stopped one does not)."""
    return [r.name for r in Snapshot("p", (), live=live).live_running]


def test_one_name_is_that_variant_alone_and_replaces_a_running_live_set(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    assert desired(["mtp"], stack, _snap()) == Desired(("mtp",), EXCLUSIVE)
    running = _running(stack, "baseline/1", "mtp/1")
    want = desired(["baseline"], stack, _snap(*running))
    assert want == Desired(("baseline",), EXCLUSIVE, ("baseline/1", "mtp/1"))  # it replaces the set
    stopped = [LiveRunning(**{**r.__dict__, "status": "exited"}) for r in running]
    assert desired(["baseline"], stack, _snap(*stopped)).replaces == ()  # nothing live serves: a swap


def test_several_names_are_the_set_side_by_side_whatever_runs(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    running = _running(stack, "dflash2/1")
    want = desired(["baseline", "mtp"], stack, _snap(*running))
    assert want == Desired(("baseline", "mtp"), SIDE_BY_SIDE)


def test_up_alone_is_the_stacks_live_set_else_a_usage_error(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    assert desired([], stack, _snap()) == Desired(("baseline",), SIDE_BY_SIDE)
    plain = load_stack([REPO / "composer.toml"], None, environ={})
    with pytest.raises(ConfigError, match="up needs a VARIANT"):
        desired([], plain, _snap())
    with pytest.raises(UsageError):  # an unknown name: exit 2 before anything is decided
        desired(["nope"], stack, _snap())


def _alone(stack: Stack, variant: str, gpus: str = "-") -> tuple[Member, str]:
    target = resolve_target(stack, variant)
    spec = target.spec
    member = Member(variant, variant, spec.container_name, spec.compose_service, f"/s/{variant}.yml", gpus)
    return member, target.hash


def test_x_alone_on_a_live_set_starts_x_then_drains_and_stops_every_member(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    running = _running(stack, "baseline/1", "mtp/1")
    alone, digest = _alone(stack, "baseline")
    plan = plan_alone(alone, digest, running, "p")
    assert plan.mode == "replace" and plan.alone == "baseline" and plan.leaving == ("baseline/1", "mtp/1")
    assert _ops(plan) == [
        "Start baseline",
        "Gate baseline",
        "Publish",
        "Drain",
        "Stop baseline/1",
        "Drain",
        "Stop mtp/1",
        "UpdateGateway(replace)",
    ]
    publish = plan.ops[2]
    assert publish.upstreams == () and [u["name"] for u in publish.previous] == ["baseline/1", "mtp/1"]
    assert publish.inverse()[0].upstreams == publish.previous  # an undo gives the set back
    text = plan.describe()
    assert "(replace; leaving: baseline/1, mtp/1)" in text and "baseline serves alone" in text
    data = plan.as_data()
    assert (data["mode"], data["alone"], data["leaving"]) == ("replace", "baseline", ["baseline/1", "mtp/1"])


def test_members_whose_gpus_x_needs_leave_first_and_x_waits_for_their_release(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    running = _running(stack, "baseline/1", "mtp/1")
    alone, digest = _alone(stack, "mtp", gpus="2,3")
    plan = plan_alone(alone, digest, running, "p")
    assert _ops(plan) == [
        "Publish",
        "Drain",
        "Stop mtp/1",
        "AwaitRelease",
        "Start mtp",
        "Gate mtp",
        "Publish",
        "Drain",
        "Stop baseline/1",
        "UpdateGateway(replace)",
    ]
    assert [u["name"] for u in plan.ops[0].upstreams] == ["baseline/1"]  # baseline/1 serves meanwhile
    every, digest = _alone(stack, "mtp", gpus="all")  # the one serving container takes every GPU
    every_plan = plan_alone(every, digest, running, "p")
    # the last member serving is never stopped bare: the gateway holds and drains (its streams
    # continue) before it stops, and releases once mtp's one container is routed
    assert _ops(every_plan) == [
        "Publish",
        "Drain",
        "Stop baseline/1",
        "Hold",
        "Stop mtp/1",
        "AwaitRelease",
        "Start mtp",
        "Gate mtp",
        "Publish",
        "Release",
        "UpdateGateway(replace)",
    ]
    hold, release = every_plan.ops[3], every_plan.ops[9]
    assert hold.continue_streams and hold.target == "mtp" and release.variant == "mtp"
    assert "Hold: hold new requests at the gateway" in every_plan.describe()
    drain = plan_alone(every, digest, running, "p", continue_streams=False).ops[3]
    assert drain == Hold("mtp", continue_streams=False)
    # a gateway started now served nothing: nothing to hold
    assert "Hold" not in _ops(plan_alone(every, digest, running, "p", gateway_running=False))


def test_an_adopted_member_that_is_x_serves_on_untouched(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    alone, digest = _alone(stack, "baseline")
    adopted = LiveRunning("baseline/1", "baseline", alone.container, "0,1", digest, "running", alone.service)
    running = [adopted, *_running(stack, "mtp/1")]
    plan = plan_alone(alone, digest, running, "p")
    assert plan.keep == ("baseline/1",) and plan.start == () and plan.leaving == ("mtp/1",)
    assert _ops(plan) == ["Publish", "Drain", "Stop mtp/1", "UpdateGateway(replace)"]
    # the gateway's settings name the members: it is replaced last, from X's own run file
    assert plan.ops[-1].run_file == alone.run_file and plan.ops[-1].inverse() == ()
    # a gateway that does not run is started from X's run file instead
    cold = _ops(plan_alone(alone, digest, running, "p", gateway_running=False))
    assert cold[0] == "UpdateGateway(start)" and "UpdateGateway(replace)" not in cold
    other, other_digest = _alone(stack, "mtp")  # X's service runs another variant: it stops first
    ops = _ops(plan_alone(other, other_digest, running, "p"))
    assert ops[:3] == ["Publish", "Drain", "Stop baseline/1"] and "Start mtp" in ops


def test_modes_of_the_plans(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    running = _running(stack, "baseline/1")
    assert plan_live(resolve_live(stack, ["baseline", "mtp"]), running).mode == "join"
    assert plan_live(resolve_live(stack, ["mtp"]), running).mode == "replace"
    assert plan_live(resolve_live(stack, ["baseline"]), running).mode == "unchanged"
    mtp = Member("mtp", "mtp", "p-vllm-1", "vllm", "/s/mtp.yml")
    assert Plan((), ("mtp",), (Start(mtp), Gate(mtp))).mode == "join"
    assert Plan(("baseline",), ("mtp",), (Stop(replace(mtp, name="baseline")), Start(mtp))).mode == "replace"
    assert Plan(("mtp",), ("mtp",)).mode == "unchanged"
    assert Plan(("mtp",), ("mtp",), refused="no").mode == "refused"
    assert Plan(("mtp",), (), (Stop(mtp),)).mode == "down"


class _Box:
    """Stands in for a VariantContainer: only its labels are read."""

    def __init__(self, **labels: str) -> None:
        self.container = SimpleNamespace(labels=labels)


def test_the_snapshot_names_live_members_and_the_adopted_serving_container(tmp_path: Path) -> None:
    from composer import labels as label_names
    from composer.swap.snapshot import live_members
    from tests.swap.test_plan_units import _info

    stack = _stack(tmp_path)
    alone = _info("baseline", service=stack.service, sleep_mode=False)
    mtp = _info("mtp", service="vllm-mtp-1", sleep_mode=False)
    live = _Box(**{label_names.LIVE: "mtp/1", label_names.GPUS: "2,3"})
    assert (
        live_members(stack, [(_Box(), alone)]) == ()
    )  # no live set: the one serving container is not a member
    found = live_members(stack, [(live, mtp), (_Box(), alone)])
    assert [(r.name, r.container, r.gpus, r.service) for r in found] == [
        ("baseline/1", alone.name, "0,1", stack.service),  # adopted as it runs
        ("mtp/1", mtp.name, "2,3", "vllm-mtp-1"),
    ]
    snap = Snapshot("p", (), live=(*found, LiveRunning(**{**found[1].__dict__, "status": "exited"})))
    assert [r.name for r in snap.live_running] == ["baseline/1", "mtp/1"]
    # where the gateway says its set, a one serving container outside it (a failed `up X
    # --no-rollback` left it) is no member; the adopted one is
    assert [r.name for r in live_members(stack, [(live, mtp), (_Box(), alone)], {"mtp/1"})] == ["mtp/1"]
    routed = live_members(stack, [(live, mtp), (_Box(), alone)], {"mtp/1", "baseline/1"})
    assert [r.name for r in routed] == ["baseline/1", "mtp/1"]


def test_a_live_change_removes_what_a_failed_change_left_and_serves_nothing(tmp_path: Path) -> None:
    stack = _stack(tmp_path)
    target = resolve_live(stack, ["baseline", "mtp"])
    running = _running(stack, "baseline/1", "mtp/1")
    assert plan_live(target, running).no_op
    plan = plan_live(target, running, idle=[Member("p-vllm-1", "crash", "p-vllm-1", "vllm", "")])
    assert _ops(plan) == ["Stop(remove) p-vllm-1"] and plan.ops[0].cause
    crashed = LiveRunning(
        "mtp-crash/1", "mtp-crash", "p-mtp-crash-1", "4,5", "h", "exited", "vllm-mtp-crash-1"
    )
    plan = plan_live(target, [*running, crashed])
    assert _ops(plan) == ["Stop(remove) mtp-crash/1"] and plan.ops[0].member.container == "p-mtp-crash-1"


def test_a_live_sets_changed_gateway_settings_are_applied_in_place_first(tmp_path: Path) -> None:
    from composer.swap.plan import GatewayChange

    stack = _stack(tmp_path)
    target = resolve_live(stack, ["baseline", "mtp"])
    running = _running(stack, "baseline/1", "mtp/1")
    same = GatewayChange("", (("GATEWAY_ALIASES", ""),), ())
    assert plan_live(target, running, gateway=same).no_op
    changed = GatewayChange("", (("GATEWAY_ALIASES", "quick=baseline"),), ("GATEWAY_ALIASES",))
    plan = plan_live(target, running, gateway=changed)
    assert _ops(plan) == ["UpdateGateway(in place)"] and plan.mode == "join"
    assert plan.ops[0].settings == (("GATEWAY_ALIASES", "quick=baseline"),)
    assert "UpdateGateway: apply the gateway's changed settings in place (aliases)" in plan.describe()
    joined = plan_live(resolve_live(stack, ["baseline", "mtp", "dflash2"]), running, gateway=changed)
    assert _ops(joined)[:2] == ["UpdateGateway(in place)", "Start dflash2/1"]


def test_the_containers_a_live_change_removes_are_those_neither_serving_asleep_nor_members(
    tmp_path: Path,
) -> None:
    import dataclasses

    from composer.swap.entry import idle_containers
    from tests.swap.test_plan_units import _info, _snap
    from tests.swap.test_standby_units import _stack as _switch_stack

    stack, live_stack = _switch_stack(), _stack(tmp_path)
    crashed = dataclasses.replace(_info("mtp-crash", service="vllm", sleep_mode=False), status="exited")
    snap = _snap(stack, [crashed])
    member = LiveRunning(
        "baseline/1", "baseline", "p-vllm-baseline-1", "0,1", "h", "running", "vllm-baseline-1"
    )
    snap = dataclasses.replace(snap, live=(member,))
    (idle,) = idle_containers(snap)
    assert (idle.container, idle.variant, idle.service) == (crashed.name, "mtp-crash", "vllm")
    plan = plan_live(resolve_live(live_stack, ["baseline"]), [member], idle=[idle])
    assert plan.ops[0] == Stop(idle, "remove", cause="neither serving nor wanted asleep")
