"""The single switch as typed operations, without Docker: the plan's operations and their
inverses, the executor undoing exactly what ran (a fake dispatch table), the error it words,
and the operations in the plan's JSON."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from composer.engine.containers import RunningVariant
from composer.errors import HealthCheckFailed, SwapFailed
from composer.swap.execute import execute
from composer.swap.ops import (
    AwaitRelease,
    Gate,
    Hold,
    Member,
    Op,
    Probation,
    Release,
    Settle,
    Start,
    Stop,
)
from composer.swap.outcome import UpOptions, UpResult
from composer.swap.plan import Bring, GatewayChange, plan_swap, with_gateway
from composer.swap.transaction import Context, DockerSwap

MTP = Member("mtp", "mtp", "p-vllm-1", "vllm", "/state/mtp-b2.yml", "0,1", speculative=True)
BRING = Bring(MTP, gateway=True, gpus="0,1", settle=2.0, warmup=1, probation=30.0)


def _serving(**kw: object) -> RunningVariant:
    info = RunningVariant(
        container_id="c1",
        name="p-vllm-1",
        variant="baseline",
        config_hash="a1",
        image="img",
        status="running",
        docker_health=None,
        started_at=datetime.now(UTC),
        port=8000,
        served_name="model",
        config_file="/state/baseline-a1.yml",
        restart_count=0,
        service="vllm",
    )
    return replace(info, **kw)  # type: ignore[arg-type]


def _plan(current: RunningVariant | None = None, **kw: object):
    return with_gateway(
        plan_swap("mtp", "b2", current, False, bring=BRING, **kw), GatewayChange(), BRING, True
    )  # type: ignore[arg-type]


def _undo(ran: list[Op]) -> list[Op]:
    return [inverse for op in reversed(ran) for inverse in op.inverse()]


def test_a_stop_start_gate_plan_undoes_to_the_previous_run_file_gate_and_route_in_reverse() -> None:
    plan = _plan(_serving())
    baseline = Member("baseline", "baseline", "p-vllm-1", "vllm", "/state/baseline-a1.yml", "0,1")
    assert plan.ops == (
        Hold("mtp", "", False),
        Stop(baseline, settle=2.0),
        AwaitRelease("0,1"),
        Start(MTP),
        Gate(MTP),
        Settle(MTP, 2.0, "ready", False, 1, False),
        Release("mtp", back="baseline"),
        Probation(MTP, 30.0),
    )
    assert plan.steps == ("stop", "release", "start", "gate")
    # the gate failed: the new container goes, the previous one starts again from exactly the
    # run file and service that created it (routed to by its start), is gated and settles
    assert _undo(list(plan.ops[:5])) == [
        Stop(MTP, "remove"),
        Start(baseline),
        Gate(baseline),
        Settle(baseline, 2.0),
    ]
    # on probation: the clients are held again first, for baseline's return
    assert _undo(list(plan.ops))[:2] == [Hold("baseline"), Stop(MTP, "remove")]
    # a first start leaves nothing: its undo removes the project's network too
    first = _plan()
    assert first.ops[1] == Start(MTP, first=True)
    assert _undo(list(first.ops[:3])) == [Stop(MTP, "remove", network_of="/state/mtp-b2.yml")]


def test_a_sleep_is_undone_by_waking_it_and_a_wake_by_removing_the_target() -> None:
    current = _serving(sleep_mode=True)
    sleeper = _serving(
        name="p-vllm-mtp-1", variant="mtp", config_hash="b2", service="vllm-mtp", config_file=None
    )
    plan = _plan(current, current_sleeps=True, target_asleep=sleeper)
    woken = Member("mtp", "mtp", "p-vllm-mtp-1", "vllm-mtp", "", "0,1", speculative=True)
    baseline = Member("baseline", "baseline", "p-vllm-1", "vllm", "/state/baseline-a1.yml", "0,1")
    assert plan.steps == ("sleep", "wake", "gate")
    assert plan.wake == "p-vllm-mtp-1" and plan.rollback is not None and plan.rollback.how == "wake"
    settle = next(op for op in plan.ops if isinstance(op, Settle))
    # a quarter of the watch, from the wake call; the acceptance check's requests count as warm-up
    assert settle == Settle(woken, 0.5, "wake", True, 0, True)
    assert _undo(list(plan.ops[:4])) == [
        Stop(woken, "remove"),
        Start(baseline, "wake"),
        Gate(baseline),
        Settle(baseline, 2.0, "wake", woke=True),
    ]
    assert Stop(baseline, "sleep").inverse()[0] == Start(baseline, "wake")


def _recorder(fail_at: Op | None, seen: list[str]) -> dict[type[Op], object]:
    def handle(op: Op) -> None:
        seen.append(op.describe())
        if op is fail_at:
            raise HealthCheckFailed("boom")

    kinds = {type(o) for op in _plan(_serving()).ops for o in (op, *op.inverse(), *_undo([op]))}
    return dict.fromkeys(kinds, handle)


@pytest.mark.parametrize("at", range(8))
def test_a_failure_at_each_operation_runs_exactly_the_inverses_of_what_ran(at: int) -> None:
    plan = _plan(_serving())
    seen: list[str] = []
    with pytest.raises(SwapFailed):
        execute(plan.ops, _recorder(plan.ops[at], seen))  # type: ignore[arg-type]
    ran = list(plan.ops[: at + 1])
    assert seen == [op.describe() for op in (*ran, *_undo(ran))]


def _swap(plan, rollback: bool = True) -> DockerSwap:
    stack = SimpleNamespace(service="vllm", api_key="k")
    ctx = Context(stack, None, UpOptions(rollback=rollback))  # type: ignore[arg-type]
    swap = DockerSwap(ctx, UpResult("mtp", "swapped"), None, None)
    swap.cause = "the container exited with code 1"
    return swap


def test_the_error_names_the_cause_first_then_what_the_undo_did() -> None:
    plan = _plan(_serving())
    err = HealthCheckFailed("x")
    done = _swap(plan).explain(plan, err, list(plan.ops[:5]), [])
    assert (
        str(done)
        == "mtp failed: the container exited with code 1; rolled back to baseline, which serves again"
    )
    assert done.rolled_back
    undone = [(Stop(MTP, "remove"), "Cannot connect"), (Start(MTP), "Cannot connect too")]
    both = _swap(plan).explain(plan, err, list(plan.ops[:5]), undone)
    assert (
        "; could not remove it: Cannot connect; rollback to baseline failed too: Cannot connect too"
        in str(both)
    )
    assert not both.rolled_back
    kept = _swap(plan, rollback=False).explain(plan, err, list(plan.ops[:5]), None)
    assert str(kept).endswith("rollback disabled (--no-rollback): what ran is left as it is")
    first = _plan()
    assert str(_swap(first).explain(first, err, list(first.ops[:3]), [])).endswith("; nothing is running")


def test_the_plans_json_lists_its_operations_and_keeps_its_fields() -> None:
    data = _plan(_serving()).as_data()
    assert [op["op"] for op in data["operations"]] == [  # type: ignore[union-attr]
        "Hold",
        "Stop",
        "AwaitRelease",
        "Start",
        "Gate",
        "Settle",
        "Release",
        "Probation",
    ]
    assert data["steps"] == ["stop", "release", "start", "gate"] and data["wake"] is None
    assert data["rollback"] == {
        "variant": "baseline",
        "how": "start",
        "container": "p-vllm-1",
        "config_file": "/state/baseline-a1.yml",
        "service": "vllm",
    }
    text = _plan(_serving()).describe()
    assert "  4. Start: start mtp from /state/mtp-b2.yml (service vllm), route to it" in text
    assert "rollback: baseline: start baseline from /state/baseline-a1.yml" in text


def _cases() -> set[tuple[type[Op], str]]:
    """Every operation type with each of its cases (its `how` field's values; "": it has none)."""
    import inspect
    import typing

    from composer.swap import ops

    every: set[tuple[type[Op], str]] = set()
    for _, kind in inspect.getmembers(ops, inspect.isclass):
        if issubclass(kind, ops.Op) and kind is not ops.Op:
            how = typing.get_type_hints(kind).get("how")
            every |= {(kind, case) for case in typing.get_args(how)} if how else {(kind, "")}
    return every


def _handled(table) -> set[tuple[type[Op], str]]:
    """The (type, case) pairs a dispatch table runs: a type with cases only through `Cases`."""
    from composer.swap.execute import Cases

    return {(kind, case) for kind, run in table.items() for case in (run if isinstance(run, Cases) else [""])}


def test_one_dispatch_table_runs_every_operation_of_a_switch_and_of_a_live_change() -> None:
    """Docker's executor has one handler per operation type and case, whichever plan holds it
    (only the Kubernetes rollouts' operations have none)."""
    from composer.swap import ops

    kubernetes = {(ops.Reapply, ""), (ops.RollBack, "")}
    table = _swap(_plan(_serving())).handlers()
    assert _handled(table) == _cases() - kubernetes
    assert {(ops.Stop, "sleep"), (ops.Start, "adopt"), (ops.UpdateGateway, "in place")} <= _handled(table)


def test_every_operation_has_a_handler_in_docker_or_kubernetes() -> None:
    from composer.kube.execute import KubeRollout
    from composer.swap import ops
    from composer.swap.outcome import UpOptions

    docker = _handled(_swap(_plan(_serving())).handlers())
    kubernetes = _handled(KubeRollout(None, None, UpOptions(), print, print).handlers())  # type: ignore[arg-type]
    assert _cases() - docker - kubernetes == set()
    assert {(ops.Reapply, ""), (ops.RollBack, ""), (ops.Start, "start"), (ops.Stop, "stop")} <= kubernetes
    assert (ops.Stop, "sleep") not in kubernetes  # a case a table lacks is not run by another case's handler


def test_a_failed_probation_holds_again_for_the_variant_the_undo_brings_back() -> None:
    """The undo's hold begins the gateway's rollback switch: it names what comes back, never the
    variant that failed (the status page showed `crashlater -> crashlater`)."""
    from composer.swap.ops import Hold, Release

    assert Release("crashlater", back="baseline").inverse() == (Hold("baseline"),)
    assert Release("mtp").inverse() == (Hold(""),)  # nothing served before: nothing to name
