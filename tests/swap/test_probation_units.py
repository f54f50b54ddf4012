"""After the gate, without Docker: the probation watch, the setting, the restarts `status`
counts since a swap, a stopped gateway started again mid-swap, and a recreated gateway
routed to the serving variant before it is put to sleep."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from composer.engine import gate
from composer.engine.containers import RunningVariant, upstream_url
from composer.engine.gate import GateTarget, watch_probation
from composer.errors import GatewayControlError, HealthCheckFailed
from composer.stack.values import parse_probation
from composer.swap import status, transaction
from composer.swap.holding import Drained
from composer.swap.journal import append_history
from tests.conftest import answering, free_port


@pytest.fixture
def healthy_port() -> Iterator[int]:
    with answering() as port:
        yield port


class _Docker:
    """The SDK container under a VariantContainer: its state changes after `runs_for` looks."""

    def __init__(self, runs_for: int, then: dict) -> None:
        self.looks = 0
        self.runs_for = runs_for
        self.then = then
        self.attrs: dict = {}
        self.reload()

    def reload(self) -> None:
        self.looks += 1
        running = {"State": {"Running": True, "StartedAt": "t0", "Status": "running"}, "RestartCount": 0}
        self.attrs = running if self.looks <= self.runs_for else self.then


class _Variant:
    def __init__(self, docker: _Docker) -> None:
        self.container = docker

    def exit_reason(self) -> str | None:
        state = self.container.attrs["State"]
        if state.get("Status") == "exited":
            return f"the container exited with code {state.get('ExitCode')}"
        if self.container.attrs.get("RestartCount"):
            return "the container exited with code 1 and was restarted"
        return None

    def log(self) -> str:
        return "RuntimeError: CUDA error: an illegal memory access was encountered"


def _target(port: int) -> GateTarget:
    return GateTarget("crashlate", port, "127.0.0.1", "model", None)


RESTARTED = {"State": {"Running": True, "StartedAt": "t1", "Status": "running"}, "RestartCount": 1}


def test_a_restart_during_the_probation_fails_it_with_the_log_tail(healthy_port: int) -> None:
    variant = _Variant(_Docker(runs_for=3, then=RESTARTED))
    with pytest.raises(HealthCheckFailed) as err:
        watch_probation(variant, _target(healthy_port), 30.0, 0.01)  # type: ignore[arg-type]
    assert "exited with code 1 and was restarted during its probation (30s)" in str(err.value)
    assert "illegal memory access" in err.value.log_tail


def test_an_exit_during_the_probation_fails_it(healthy_port: int) -> None:
    exited = {"State": {"Running": False, "StartedAt": "t0", "Status": "exited", "ExitCode": 1}}
    with pytest.raises(HealthCheckFailed, match="exited with code 1 during its probation"):
        watch_probation(_Variant(_Docker(2, exited)), _target(healthy_port), 30.0, 0.01)  # type: ignore[arg-type]


def test_a_variant_that_keeps_running_and_answering_passes_its_probation(healthy_port: int) -> None:
    docker = _Docker(runs_for=10**6, then=RESTARTED)
    watch_probation(_Variant(docker), _target(healthy_port), 0.3, 0.01)  # type: ignore[arg-type]
    assert docker.looks > 2


def test_health_failing_in_a_row_asks_whether_the_gateway_is_gone_first() -> None:
    asked = []

    def gone() -> None:
        asked.append(True)
        raise GatewayControlError("probe", "the gateway container exited with code 137")

    variant = _Variant(_Docker(runs_for=10**6, then=RESTARTED))
    with pytest.raises(GatewayControlError, match="exited with code 137"):
        watch_probation(variant, _target(free_port()), 30.0, 0.01, gone)  # type: ignore[arg-type]
    assert asked == [True]
    with pytest.raises(HealthCheckFailed, match=r"/health stopped answering 200 \(3 probes in a row\)"):
        watch_probation(variant, _target(free_port()), 30.0, 0.01)  # type: ignore[arg-type]


def test_run_mark_of_a_removed_container() -> None:
    from docker.errors import NotFound

    class _Gone:
        def reload(self) -> None:
            raise NotFound("gone")

    assert gate.run_mark(SimpleNamespace(container=_Gone())) == (None, -1, False)  # type: ignore[arg-type]


def test_the_probation_setting_is_a_bounded_duration() -> None:
    assert parse_probation("90s") == 90 and parse_probation("0s") == 0
    with pytest.raises(ValueError, match="at most 60m"):
        parse_probation("2h")
    with pytest.raises(ValueError):
        parse_probation("soon")


def _running(restarts: int, container_id: str = "abc") -> RunningVariant:
    return RunningVariant(
        container_id=container_id,
        name="p-vllm-1",
        variant="mtp",
        config_hash="h",
        image="i",
        status="running",
        docker_health=None,
        started_at=datetime.now(UTC),
        port=8000,
        served_name="model",
        config_file=None,
        restart_count=restarts,
    )


def test_status_counts_the_restarts_since_the_swap_recorded(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert status.restarts_since_swap("p", _running(2)) == 2  # no swap recorded it: every restart
    append_history("p", {"kind": "up", "serving_container": {"id": "abc", "restart_count": 2}})
    append_history("p", {"kind": "up", "serving_container": {"id": "other", "restart_count": 0}})
    assert status.restarts_since_swap("p", _running(2)) == 0
    assert status.restarts_since_swap("p", _running(3)) == 1
    data = {"running": True, "variant": "mtp", "restarts_since_swap": 1}
    assert "mtp restarted 1 time(s) since the swap" in (status._restarted(data) or "")
    assert status._restarted({**data, "restarts_since_swap": 0}) is None
    looping = {"running": False, "variant": None, "last_exit": {"variant": "mtp"}, "restarts_since_swap": 2}
    assert "mtp restarted 2 time(s) since the swap" in (status._restarted(looping) or "")


def _ctx(hold: object = None) -> transaction.Context:
    return transaction.Context(SimpleNamespace(), SimpleNamespace(), SimpleNamespace(), hold=hold)  # type: ignore[arg-type]


def test_a_gateway_stopped_during_a_step_is_started_again_and_the_step_runs_once_more(monkeypatch) -> None:
    monkeypatch.setattr(transaction, "gateway_stopped", lambda ctx: "exited with code 137")
    calls: list[str] = []
    revived = _ctx(hold="new")

    def step(ctx: transaction.Context) -> str:
        calls.append(f"step {ctx.hold}")
        if ctx.hold == "old":
            raise GatewayControlError("route", "docker exec failed: container is not running")
        return "routed"

    def revive(ctx: transaction.Context, stopped: str) -> transaction.Context:
        calls.append(f"revive ({stopped})")
        return revived

    held = [_ctx(hold="old")]
    warnings: list[str] = []
    out = transaction.through_restarts(held, "mtp", lambda c: calls.append("route"), step, revive, warnings)
    assert calls == ["step old", "revive (exited with code 137)", "route", "step new"]
    assert held[-1] is revived and out == "routed"
    assert warnings == ["the gateway stopped during the swap (exited with code 137); it was started again"]


def test_a_failed_step_with_the_gateway_running_is_not_retried(monkeypatch) -> None:
    monkeypatch.setattr(transaction, "gateway_stopped", lambda ctx: None)

    def step(ctx: transaction.Context) -> None:
        raise HealthCheckFailed("not ready after 900s")

    with pytest.raises(HealthCheckFailed):
        transaction.through_restarts([_ctx(hold="old")], "mtp", lambda c: None, step, lambda c, s: c, [])


class _Control:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def route(self, url: str, variant: str | None = None) -> str:
        self.calls.append(f"route {url}")
        return ""

    def wait_ready(self, timeout_s: float) -> bool:
        self.calls.append("wait_ready")
        return True


def test_the_new_gateway_finds_its_upstream_before_the_sleep(monkeypatch) -> None:
    """A swap that recreates the gateway and puts the serving variant to sleep routes the new
    gateway first and waits until it reaches it: the sleep goes to the serving container, not
    to a name it has not found."""
    from composer.swap.ops import Hold, Member, Stop, UpdateGateway
    from composer.swap.plan import Bring, GatewayChange, plan_swap, with_gateway

    calls: list[str] = []
    hold = SimpleNamespace(end=lambda *a, **k: None, control=_Control(calls))
    monkeypatch.setattr(transaction, "drain", lambda *a: calls.append("drain") or (hold, Drained(0, 0, 0.0)))
    current = replace(_running(0), name="p-vllm-baseline-1", variant="baseline", service="vllm-baseline")
    bring = Bring(Member("mtp", "mtp", "p-vllm-1", "vllm", "/state/mtp.yml"), gateway=True)
    change = GatewayChange("its image changed")
    plan = plan_swap("mtp", "h", current, False, current_sleeps=True, bring=bring)
    plan = with_gateway(plan, change, bring, True)
    assert [(type(op), op.how) for op in plan.ops[:3]] == [
        (UpdateGateway, "replace"),
        (Hold, ""),
        (Stop, "sleep"),
    ]
    ctx = transaction.Context(SimpleNamespace(service="vllm"), SimpleNamespace(), SimpleNamespace())  # type: ignore[arg-type]
    result = SimpleNamespace(timings={}, notes=[], warnings=[], drained=None, port_gap=None)
    swap = transaction.DockerSwap(ctx, result, SimpleNamespace(), None)  # type: ignore[arg-type]
    monkeypatch.setattr(swap, "update_gateway", lambda op: calls.append("recreate"))
    swap.handlers()[UpdateGateway](plan.ops[0])
    swap.handlers()[Hold](plan.ops[1])
    assert calls == ["recreate", "drain", "route http://p-vllm-baseline-1:8000", "wait_ready"]


def test_a_sleeper_the_gateway_still_routes_to_is_woken_not_started_again() -> None:
    """`up` killed just after it put the serving variant to sleep leaves the gateway routed to
    the sleeper: its own /is_sleeping answer says it sleeps, so the next `up` wakes it."""
    from composer.swap.snapshot import Snapshot, classify
    from tests.swap.test_plan_units import Box, _decide, _info
    from tests.swap.test_standby_units import _stack

    stack = _stack("stack.standby=sleep")
    baseline = _info("baseline", service="vllm-baseline", sleep_mode=True)
    route = upstream_url(baseline.name)
    found = [(Box(baseline), baseline)]
    (member,) = classify(stack, found, route, {route: True})  # type: ignore[arg-type]
    assert member.asleep and not member.serving
    plan = _decide(Snapshot("p", (member,), route=route), "baseline", stack=stack)
    assert plan.steps == ("wake", "gate") and plan.wake == baseline.name
    (waking,) = classify(stack, found, route, {route: True}, waking=True)  # type: ignore[arg-type]
    assert waking.serving and not waking.asleep  # the gateway wakes it: it serves


def test_a_docker_that_does_not_answer_says_nothing_about_the_gateway(monkeypatch) -> None:
    import requests

    import composer.render.gateway as rendered

    def refuse(name: str) -> None:
        raise requests.ConnectionError("Connection aborted.")

    monkeypatch.setattr(
        rendered, "build_gateway_spec", lambda _: SimpleNamespace(container_name="p-gateway-1")
    )
    client = SimpleNamespace(containers=SimpleNamespace(get=refuse))
    ctx = transaction.Context(SimpleNamespace(), client, SimpleNamespace())  # type: ignore[arg-type]
    assert transaction.gateway_stopped(ctx) is None
