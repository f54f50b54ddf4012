"""The snapshot's verdicts (who serves, who sleeps) and the plan decided from them (pure)."""

from __future__ import annotations

from composer.engine.containers import RunningVariant, upstream_url
from composer.swap.plan import decide
from composer.swap.snapshot import Snapshot, classify
from tests.swap.test_standby_units import _stack


def _info(
    variant: str, *, service: str, sleep_mode: bool, policy: str = "unless-stopped", h: str = "h"
) -> RunningVariant:
    name = f"p-{service}-1"
    return RunningVariant(
        container_id=name,
        name=name,
        variant=variant,
        config_hash=h,
        image="img",
        status="running",
        docker_health=None,
        started_at=None,
        port=8000,
        served_name="m",
        config_file=f"/state/p/{variant}-{h}.yml",
        restart_count=0,
        service=service,
        sleep_mode=sleep_mode,
        restart_policy=policy,
    )


class Box:
    """Stands in for a VariantContainer: the plan never calls Docker."""

    def __init__(self, info: RunningVariant) -> None:
        self.name = info.name


def _snap(stack, infos, route=None, answers=None) -> Snapshot:
    found = [(Box(i), i) for i in infos]
    return Snapshot("p", classify(stack, found, route, answers or {}), route=route)  # type: ignore[arg-type]


def _decide(snap: Snapshot, target: str, **kw):
    stack = kw.pop("stack")
    sleeps = {n: v.standby == "sleep" for n, v in stack.variants.items()}
    return decide(
        snap,
        target,
        "h",
        target_sleeps=sleeps[target],
        sleeps_in_stack=sleeps,
        current_ready=kw.get("ready", True),
    )


def test_standby_turned_on_while_a_stop_mode_variant_serves_stops_it_cold_with_a_note() -> None:
    stack = _stack("stack.standby=sleep")
    mtp = _info("mtp", service="vllm", sleep_mode=False)
    plan = _decide(_snap(stack, [mtp], route="http://vllm:8000"), "baseline", stack=stack)
    assert plan.steps == ("stop", "release", "start", "gate")
    assert any("started without sleep mode" in n for n in plan.notes)
    # the rollback starts the old container from the file and service that created it
    assert plan.rollback is not None and plan.rollback.how == "start"
    assert (plan.rollback.config_file, plan.rollback.service) == (mtp.config_file, "vllm")
    assert "vllm" in plan.describe() and "nothing" not in plan.describe()


def test_a_sleep_mode_container_is_put_to_sleep_and_the_rollback_wakes_it() -> None:
    stack = _stack("stack.standby=sleep")
    mtp = _info("mtp", service="vllm-mtp", sleep_mode=True)
    plan = _decide(_snap(stack, [mtp], route=upstream_url(mtp.name)), "baseline", stack=stack)
    assert plan.steps == ("sleep", "start", "gate")
    assert plan.rollback is not None and plan.rollback.how == "wake"


def test_asleep_is_the_containers_own_answer_not_the_route() -> None:
    stack = _stack("stack.standby=sleep")
    serving = _info("baseline", service="vllm-baseline", sleep_mode=True)
    restarted = _info("mtp", service="vllm-mtp", sleep_mode=True, policy="no")
    # the gateway routes to baseline; mtp was restarted by hand and answers is_sleeping: false
    snap = _snap(
        stack,
        [serving, restarted],
        route=upstream_url(serving.name),
        answers={upstream_url(restarted.name): False},
    )
    assert snap.serving is not None and snap.serving.variant == "baseline"
    assert [m.variant for m in snap.awake_idle] == ["mtp"] and snap.asleep == []
    # the next up of mtp routes to the awake container instead of waking or starting it
    plan = _decide(snap, "mtp", stack=stack)
    assert "adopt" in plan.steps and "start" not in plan.steps and "wake" not in plan.steps
    # an up of another variant stops the stray awake one first
    dflash = _decide(snap, "dflash2", stack=stack)
    assert dflash.stop_first == (restarted.name,)


def test_without_the_gateways_route_the_parked_policy_tells_the_sleeper_from_the_server() -> None:
    stack = _stack("stack.standby=sleep")
    serving = _info("baseline", service="vllm-baseline", sleep_mode=True)
    parked = _info("mtp", service="vllm-mtp", sleep_mode=True, policy="no")
    snap = _snap(stack, [parked, serving], route=None)
    assert snap.serving is not None and snap.serving.variant == "baseline"
    assert [m.variant for m in snap.asleep] == ["mtp"]
    # a gateway restarted with the old default upstream: route known, pointing at nothing
    stale = _snap(
        stack, [parked, serving], route="http://vllm:8000", answers={upstream_url(parked.name): True}
    )
    assert stale.serving is not None and stale.serving.variant == "baseline" and stale.route_ok is False
    plan = _decide(stale, "baseline", stack=stack)
    assert plan.steps == ("route", "gate")  # the healthy variant is not restarted


def test_standby_turned_off_stops_the_sleepers_and_the_old_awake_container() -> None:
    stack = _stack()
    old_serving = _info("mtp", service="vllm-mtp", sleep_mode=True)
    sleeper = _info("dflash2", service="vllm-dflash2", sleep_mode=True, policy="no")
    snap = _snap(
        stack,
        [old_serving, sleeper],
        route=upstream_url(old_serving.name),
        answers={upstream_url(sleeper.name): True},
    )
    plan = _decide(snap, "baseline", stack=stack)
    assert plan.stop_first == (sleeper.name,)
    assert plan.steps == ("stop", "release", "start", "gate")  # mtp cannot sleep in this stack


def test_the_target_already_serving_and_ready_is_a_no_op() -> None:
    stack = _stack()
    mtp = _info("mtp", service="vllm", sleep_mode=False)
    plan = _decide(_snap(stack, [mtp], route="http://vllm:8000"), "mtp", stack=stack)
    assert plan.steps == () and "nothing to change" in plan.describe()
    assert plan.as_data()["steps"] == []
