"""Sleep standby options without Docker: the fallback, the sleep level, the GPU probe and
the cost in words."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from composer.capacity import inputs as standby
from composer.capacity import standby as planner
from composer.capacity.figures import GIB
from composer.capacity.standby import standby_cost
from composer.errors import ConfigError, PreflightFailed
from composer.probes.gpu import GpuInfo
from composer.render.target import resolve_target
from composer.stack.load import load_stack
from composer.swap.down import stop_variant
from composer.swap.outcome import UpOptions, UpResult
from composer.swap.swapper import check_standby_fits, plan_swap
from composer.swap.transaction import Context
from tests.conftest import REPO
from tests.swap.test_standby_units import _running

SLEEPY = ("stack.standby=sleep", "variants.baseline.weights_bytes=13.5G", "variants.mtp.weights_bytes=13.5G")


def _stack(*flags: str):
    return load_stack([REPO / "composer.toml"], REPO / ".env.demo", environ={}, flags=list(flags))


class FakeProbe:
    name = "fake-nvml"
    reason = ""

    def __init__(self, totals: list[int], available: bool = True) -> None:
        self.available = available
        self.totals = totals

    def gpus(self) -> list[GpuInfo]:
        return [GpuInfo(i, "H200", (9, 0), t, 0, t) for i, t in enumerate(self.totals)]


def test_fallback_and_sleep_level_are_validated_with_the_allowed_values() -> None:
    with pytest.raises(ConfigError, match=r"standby_fallback = 'nap'.*expected one of refuse, stop"):
        _stack("stack.standby_fallback=nap")
    with pytest.raises(ConfigError, match="expected one of 1, 2"):
        _stack("stack.sleep_level=3")
    assert _stack().standby_fallback == "refuse" and _stack().sleep_level == 1


def test_sleep_level_2_is_refused_for_speculative_sleepers_unless_allowed() -> None:
    with pytest.raises(ConfigError, match="acceptance drops to 0") as refused:
        _stack("stack.standby=sleep", "stack.sleep_level=2")
    assert "allow_sleep_level_2_with_speculation" in str(refused.value)
    allowed = _stack(
        "stack.standby=sleep", "stack.sleep_level=2", "stack.allow_sleep_level_2_with_speculation=1"
    )
    assert allowed.sleep_level == 2
    # only the non-speculative variant sleeps: level 2 has no drafter to lose
    assert _stack("variants.baseline.standby=sleep", "stack.sleep_level=2").sleep_level == 2


def test_gpu_memory_comes_from_the_probe_else_from_the_stack() -> None:
    stack = _stack("stack.gpus=all", "stack.gpu_memory_bytes=24G")
    assert standby.gpu_memory(stack, FakeProbe([80 * GIB, 141 * GIB])) == (80 * GIB, "probed by fake-nvml")
    assert standby.gpu_memory(stack, FakeProbe([], available=False)) == (24 * GIB, "stack.gpu_memory_bytes")
    assert standby.gpu_memory(_stack("stack.gpus=7", "stack.gpu_memory_bytes=24G"), FakeProbe([GIB])) == (
        24 * GIB,
        "stack.gpu_memory_bytes",
    )
    assert standby.gpu_memory(_stack("stack.gpus=all"), FakeProbe([], available=False)) == (None, "")


def test_the_planner_uses_the_probed_gpu_and_says_so(monkeypatch) -> None:
    monkeypatch.setattr(standby, "host_memory", lambda: 512 * GIB)
    stack = _stack(*SLEEPY, "stack.gpus=all", "stack.gpu_memory_bytes=141G")
    small = planner.plan_for(stack, "baseline", ["mtp"], FakeProbe([16 * GIB] * 4))
    assert not small.fits and "above the GPU's 16.0 GiB (probed by fake-nvml)" in small.problems[0]
    assert planner.plan_for(stack, "baseline", ["mtp"], FakeProbe([], available=False)).fits


def test_the_cost_is_given_in_gib_and_in_tokens_of_kv_cache() -> None:
    assert standby_cost("mtp", int(1.3 * GIB), 19328) == (
        "standby of mtp costs 1.3 GiB of KV cache per GPU = 72,000 tokens"
    )
    assert standby_cost("mtp", int(1.3 * GIB), None) == "standby of mtp costs 1.3 GiB per GPU"
    # the demo checkpoint: 16 full-attention layers x 2 x 4 KV heads x 256 x 2 bytes, over 4 GPUs
    assert standby.kv_bytes_per_token(_stack()) == 16 * 2 * 4 * 256 * 2 // 4


def _swapper(monkeypatch, *flags: str) -> tuple[Context, object]:
    monkeypatch.setattr(standby, "host_memory", lambda: 512 * GIB)
    stack = _stack(*SLEEPY, "stack.gpu_memory_bytes=23G", *flags)
    swapper = Context(stack, None, UpOptions())  # type: ignore[arg-type]
    plan = plan_swap("baseline", "h", _running("mtp"), True, current_sleeps=True)
    assert plan.steps == ("sleep", "start", "gate")
    return swapper, plan


def test_a_standby_that_does_not_fit_is_refused_with_the_numbers(monkeypatch) -> None:
    swapper, plan = _swapper(monkeypatch)
    target = resolve_target(swapper.stack, "baseline")
    with pytest.raises(PreflightFailed, match=r"above the GPU's 23.0 GiB \(stack.gpu_memory_bytes\)") as err:
        check_standby_fits(swapper, target, plan, UpResult("baseline", "started"), [])
    assert 'standby_fallback = "stop"' in str(err.value)


def test_with_the_stop_fallback_the_serving_variant_is_stopped_instead_and_up_says_so(monkeypatch) -> None:
    swapper, plan = _swapper(monkeypatch, "stack.standby_fallback=stop")
    target = resolve_target(swapper.stack, "baseline")
    result = UpResult("baseline", "started")
    changed = check_standby_fits(swapper, target, plan, result, [])
    assert changed.steps == ("stop", "release", "start", "gate")
    assert "mtp is stopped instead of put to sleep" in result.warnings[0]
    assert "above the GPU's 23.0 GiB" in result.warnings[0]
    # a GPU too small even without mtp asleep (dflash2 already sleeps) is still refused
    tight, plan = _swapper(monkeypatch, "stack.standby_fallback=stop")
    with pytest.raises(PreflightFailed, match=r"1 x 1\.3 GiB for dflash2 asleep"):
        check_standby_fits(tight, target, plan, result, ["dflash2"])


class Running:
    """A project container as `down VARIANT` sees it."""

    def __init__(self, variant: str, name: str, status: str = "running") -> None:
        self.variant, self.name, self.status = variant, name, status
        self.stopped = False


class Downer:
    """`down VARIANT` over fake containers: `stopped` marks what it stopped; it never takes
    the project down (the gateway and its port holder stay)."""

    def __init__(self, module: object, monkeypatch, live: list | None = None) -> None:
        self.ctx = Context(_stack("stack.standby=sleep"), None, UpOptions())  # type: ignore[arg-type]
        self.removed: list[str] = []
        monkeypatch.setattr(
            module, "stop_container", lambda ctx, what, name: self.by_name[name].__setattr__("stopped", True)
        )
        monkeypatch.setattr(module, "compose", lambda *a, **k: pytest.fail("down VARIANT ran compose down"))
        monkeypatch.setattr(
            module, "_leave_live_set", lambda ctx, variant, snap: self.removed.append(variant) or "live"
        )
        self.by_name: dict[str, Running] = {}

    def down_variant(self, variant: str, force: bool = False) -> str:
        return stop_variant(self.ctx, variant, force)


def _down(
    monkeypatch,
    containers: list[Running],
    asleep: list[Running],
    live: list | None = None,
    state: Path | None = None,
) -> Downer:
    from composer.swap import down as module

    if state is not None:  # where `down VARIANT` writes its running record and history line
        monkeypatch.setenv("XDG_STATE_HOME", str(state))
    members = [
        SimpleNamespace(
            variant=c.variant,
            info=SimpleNamespace(name=c.name, owner=None),
            running=c.status == "running",
            asleep=c in asleep,
            serving=c.status == "running" and c not in asleep,
        )
        for c in containers
    ]
    snap = SimpleNamespace(
        members=members,
        asleep=[m for m in members if m.asleep],
        live_running=live or [],
        gateway_running=False,
    )
    monkeypatch.setattr(module, "take", lambda stack, client: snap)
    downer = Downer(module, monkeypatch)
    downer.by_name = {c.name: c for c in containers}
    return downer


def test_down_variant_stops_a_sleeper_and_refuses_the_serving_one_unless_forced(
    monkeypatch, tmp_path
) -> None:
    from composer.errors import DownRefused
    from composer.swap.journal import read_history

    serving, sleeping = Running("baseline", "p-vllm-baseline-1"), Running("mtp", "p-vllm-mtp-1")
    swapper = _down(monkeypatch, [serving, sleeping], [sleeping], state=tmp_path)
    with pytest.raises(DownRefused, match="leaves nothing serving while mtp sleep") as refused:
        swapper.down_variant("baseline")
    assert refused.value.exit_code == 1 and "up mtp" in str(refused.value)
    assert not serving.stopped and not sleeping.stopped
    assert "was asleep" in swapper.down_variant("mtp") and sleeping.stopped and not serving.stopped
    assert "nothing serves now (mtp left)" in swapper.down_variant("baseline", force=True)
    assert serving.stopped
    assert swapper.down_variant("dflash2") == "dflash2 is not running; nothing stopped"
    events = read_history(swapper.ctx.stack.project).events  # one line per stop, none for a refusal
    assert [(e["kind"], e["source"], e["outcome"]) for e in events] == [
        ("down", "mtp", "stopped"),
        ("down", "baseline", "stopped"),
    ]


def test_down_of_the_only_variant_serving_is_refused_and_never_takes_the_project_down(
    monkeypatch, tmp_path
) -> None:
    from composer.errors import DownRefused

    only = Running("mtp", "p-vllm-mtp-1")
    swapper = _down(monkeypatch, [only], [], state=tmp_path)
    with pytest.raises(DownRefused, match="mtp is all that serves") as refused:
        swapper.down_variant("mtp")
    assert "`compose-spec down` stops the project" in str(refused.value) and not only.stopped
    said = swapper.down_variant("mtp", force=True)
    assert only.stopped and "nothing serves now" in said and "removes the gateway too" in said


def test_down_of_a_failed_variant_beside_a_live_set_stops_only_it(monkeypatch, tmp_path) -> None:
    """`up crash --no-rollback` on a live set leaves `crash` crash-looping as the shared
    service; `down crash` stops it alone: never the set, the gateway or its port holder."""
    crash = Running("crash", "p-vllm-1", status="restarting")
    live = [
        SimpleNamespace(name=n, variant=n.split("/")[0], container=f"p-{n[:-2]}-1", owner=None)
        for n in ("baseline/1", "mtp/1")
    ]
    swapper = _down(monkeypatch, [crash], [], live=live, state=tmp_path)
    said = swapper.down_variant("crash")
    assert crash.stopped and swapper.removed == []
    assert said == "stopped crash (p-vllm-1); baseline/1, mtp/1 serve(s) on"
    assert swapper.down_variant("mtp") == "live" and swapper.removed == ["mtp"]


class FakeControl:
    """The gateway's control channel as `wake` and `put_to_sleep` use it."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def route(self, upstream: str, variant: str | None = None) -> str:
        self.calls.append(("route", upstream))
        return ""

    def sleep(self, level: int, wait: bool = False):
        from composer.gateway.host.client import BackendReply

        self.calls.append(("sleep", level))
        return BackendReply(200, "")

    def wake_up(self):
        from composer.gateway.host.client import BackendReply

        self.calls.append(("wake_up",))
        return BackendReply(200, "")

    def backend(self, method: str, path: str, query=(), body=None, timeout_s: float = 300.0):
        from composer.gateway.host.client import BackendReply

        if path != "/version":  # asked before each sleep (tests/swap/test_sleep_wait_units.py)
            self.calls.append((method, path, body))
        return BackendReply(200, [None])


def test_level_2_sleeps_at_level_2_and_reloads_the_weights_on_wake() -> None:
    from composer.swap.standby import put_to_sleep, wake

    class Named:
        name = "p-vllm-baseline-1"

    for level, reload in ((1, False), (2, True)):
        stack = _stack("variants.baseline.standby=sleep", f"stack.sleep_level={level}")
        control = FakeControl()
        put_to_sleep(control, "baseline", stack)  # type: ignore[arg-type]
        wake(control, Named(), "baseline", stack)  # type: ignore[arg-type]
        assert control.calls[0] == ("sleep", level)
        assert control.calls[1:3] == [("route", "http://p-vllm-baseline-1:8000"), ("wake_up",)]
        assert (("POST", "/collective_rpc", {"method": "reload_weights"}) in control.calls) is reload
