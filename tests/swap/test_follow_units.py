"""`compose-spec follow` without Docker: its refusal when nothing switches, its event lines,
and how it answers a demand (Docker and `up` replaced by recorders)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from composer.cli import main
from composer.gateway.host.client import SwitchDemand
from composer.swap import follow as follow_module
from composer.swap.follow import Follower, FollowEvent
from composer.swap.outcome import UpOptions
from tests.conftest import REPO


def test_follow_refuses_a_stack_that_never_switches(tmp_path) -> None:
    env_file = tmp_path / "test.env"
    env_file.write_text("VLLM_API_KEY=sk-follow-test-key-0123456789abcdef\n")
    args = ["--env-file", str(env_file), "--stack", str(REPO / "composer.toml"), "follow"]
    result = CliRunner().invoke(main, args, env={}, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        "compose-spec: error: follow has nothing to run: set gateway.switch_on_model = true "
        "or gateway.policy = 'auto'"
    ]


def test_follow_events_are_one_line_each_with_their_reason() -> None:
    event = FollowEvent("switched", "mtp", "woke from baseline", 3.14159, {"timings": {"wake": 1.0}})
    assert event.line() == "switched mtp (3.1s): woke from baseline"
    assert FollowEvent("gateway", None, "not running").line() == "gateway -: not running"
    assert event.to_json()["details"] == {"timings": {"wake": 1.0}}


STARTABLE = SimpleNamespace(refused="")  # a variant vLLM starts with the stack


class RecordingControl:
    """The gateway side of `report_serving`, recorded."""

    def __init__(self) -> None:
        self.reports: list[tuple[str | None, str | None, bool, str]] = []

    def report_serving(self, variant, demand_id=None, ok=True, detail="", follower=False):
        assert follower, "follow marks its reports as a follower's contact"
        self.reports.append((variant, demand_id, ok, detail))
        return {}

    def state(self):
        return SimpleNamespace(raw={})  # no settings applied in place


def test_a_demand_for_the_variant_docker_shows_serving_runs_no_swap(monkeypatch) -> None:
    """After a by-hand `up mtp` the gateway may still think baseline serves and ask for mtp."""
    monkeypatch.setattr(
        follow_module.snapshot,
        "take",
        lambda stack, client, **_: SimpleNamespace(current=SimpleNamespace(variant="mtp")),
    )
    monkeypatch.setattr(follow_module, "up_set", lambda *a, **k: pytest.fail("a swap ran"))
    events: list[FollowEvent] = []
    stack = SimpleNamespace(variants={"baseline": STARTABLE, "mtp": STARTABLE})
    follower = Follower(stack, None, UpOptions(), events.append, threading.Event())  # type: ignore[arg-type]
    follower.reported = "baseline"
    control = RecordingControl()
    follower.handle(control, SwitchDemand("d1", "mtp", "a request names alias 'fast'", "alias"))  # type: ignore[arg-type]
    assert control.reports == [("mtp", "d1", True, "already serving")]
    assert (follower.reported, follower.switches) == ("mtp", 0)
    assert [e.event for e in events] == ["serving"]


GATEWAY = SimpleNamespace(status="running", attrs={"Config": {"Env": []}})


def _serving(monkeypatch, variant: str, drift: list[str] | None = None) -> None:
    snap = SimpleNamespace(current=SimpleNamespace(variant=variant), gateway=GATEWAY)
    monkeypatch.setattr(follow_module.snapshot, "take", lambda stack, client, **_: snap)
    monkeypatch.setattr(follow_module, "settings_drift", lambda stack, gateway, reported=None: drift or [])


def test_a_demand_for_another_variant_runs_up_and_reports_it(monkeypatch) -> None:
    _serving(monkeypatch, "baseline")
    result = SimpleNamespace(outcome="woke", previous="baseline", timings={"wake": 0.5})
    ran: list[str] = []
    by: list[str | None] = []

    def up(stack, requested, **kwargs):
        (target,) = requested
        ran.append(target)
        by.append(kwargs["options"].by)
        return result

    monkeypatch.setattr(follow_module, "up_set", up)
    events: list[FollowEvent] = []
    stack = SimpleNamespace(variants={"baseline": STARTABLE, "mtp": STARTABLE})
    follower = Follower(stack, None, UpOptions(), events.append, threading.Event())  # type: ignore[arg-type]
    control = RecordingControl()
    follower.handle(control, SwitchDemand("d2", "mtp", "prompt p50 40 tok -> chat-1 = mtp", "auto"))  # type: ignore[arg-type]
    assert ran == ["mtp"] and by == ["follow"]  # the history marks the swap as follow's
    assert control.reports == [("mtp", "d2", True, "woke")]
    assert follower.switches == 1
    assert [e.event for e in events] == ["switch", "switched"]
    assert events[-1].line().startswith("switched mtp (")


def test_a_demand_for_a_variant_vllm_refuses_with_the_stack_runs_no_swap(monkeypatch) -> None:
    monkeypatch.setattr(follow_module, "up_set", lambda *a, **k: pytest.fail("a swap ran"))
    why = "variants.mtp-adaptive.speculative.adaptive_verification = true with stack.attention_backend = flashinfer"
    stack = SimpleNamespace(variants={"baseline": STARTABLE, "mtp-adaptive": SimpleNamespace(refused=why)})
    events: list[FollowEvent] = []
    follower = Follower(stack, None, UpOptions(), events.append, threading.Event())  # type: ignore[arg-type]
    follower.reported = "baseline"
    control = RecordingControl()
    follower.handle(control, SwitchDemand("d3", "mtp-adaptive", "alias", "alias"))  # type: ignore[arg-type]
    assert control.reports == [("baseline", "d3", False, why)]
    assert [(e.event, e.variant) for e in events] == [("refused", "mtp-adaptive")]


def test_a_switch_never_replaces_the_gateway_and_says_when_its_settings_differ(monkeypatch) -> None:
    """The alias request that asked for the switch waits in the gateway: recreating it for a
    changed setting answered that very request 503 ("the gateway is stopping")."""
    _serving(monkeypatch, "baseline", drift=["max_held"])
    options: list[UpOptions] = []
    result = SimpleNamespace(outcome="started", previous="baseline", timings={})
    monkeypatch.setattr(follow_module, "up_set", lambda s, t, **k: options.append(k["options"]) or result)
    events: list[FollowEvent] = []
    stack = SimpleNamespace(variants={"baseline": STARTABLE, "mtp": STARTABLE})
    follower = Follower(stack, None, UpOptions(), events.append, threading.Event())  # type: ignore[arg-type]
    follower.handle(RecordingControl(), SwitchDemand("d4", "mtp", "alias", "alias"))  # type: ignore[arg-type]
    assert [o.keep_gateway for o in options] == [True]
    assert [e.event for e in events] == ["gateway", "switch", "switched"]
    assert "other settings than this stack (max_held)" in events[0].reason


def test_the_outcome_reaches_a_gateway_replaced_during_the_switch(monkeypatch) -> None:
    """Regression: the report went to the removed container and follow printed Docker's raw 404."""
    from docker.errors import NotFound

    _serving(monkeypatch, "baseline")
    result = SimpleNamespace(outcome="started", previous="baseline", timings={})
    monkeypatch.setattr(follow_module, "up_set", lambda *a, **k: result)
    fresh = RecordingControl()
    monkeypatch.setattr(follow_module, "GatewayControl", lambda container: fresh)

    class GoneControl(RecordingControl):
        def report_serving(self, *args, **kwargs):
            raise NotFound("404 Client Error: No such container")

    events: list[FollowEvent] = []
    stack = SimpleNamespace(variants={"baseline": STARTABLE, "mtp": STARTABLE})
    follower = Follower(stack, None, UpOptions(), events.append, threading.Event())  # type: ignore[arg-type]
    now = follower.handle(GoneControl(), SwitchDemand("d5", "mtp", "alias", "alias"))  # type: ignore[arg-type]
    assert now is fresh and fresh.reports == [("mtp", "d5", True, "started")]
    assert [e.event for e in events] == ["switch", "switched"]


def test_settings_drift_names_the_gateway_settings_that_differ() -> None:
    from composer.render.gateway import build_gateway_spec
    from composer.render.spec import resolve
    from composer.stack.load import load_stack

    stack = load_stack([REPO / "composer.toml"], None, environ={"VLLM_API_KEY": "sk-" + "k" * 40})
    spec = build_gateway_spec(stack)
    env = [f"{name}={resolve(value)}" for name, value in spec.environment]
    same = SimpleNamespace(attrs={"Config": {"Env": env}})
    assert follow_module.settings_drift(stack, same) == []
    changed = [e.replace("GATEWAY_MAX_HELD=", "GATEWAY_MAX_HELD=1") for e in env]
    assert follow_module.settings_drift(stack, SimpleNamespace(attrs={"Config": {"Env": changed}})) == [
        "max_held"
    ]
    # settings applied in place (what the gateway reports) win over its container's environment
    reported = {name: resolve(value) for name, value in spec.environment if name.startswith("GATEWAY_")}
    live = SimpleNamespace(attrs={"Config": {"Env": changed}})
    assert follow_module.settings_drift(stack, live, reported) == []
    assert follow_module.settings_drift(stack, same, {**reported, "GATEWAY_HOLD_TIMEOUT": "5"}) == [
        "hold_timeout"
    ]
