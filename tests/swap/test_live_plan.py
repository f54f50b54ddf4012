"""The live plan (pure): what `up` starts, keeps and stops, and how `--dry-run` says it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from composer.render.live import resolve_live
from composer.stack.load import load_stack
from composer.stack.model import Stack
from composer.stack.workload_classes import live_routing
from composer.swap.outcome import UpOptions, UpResult
from composer.swap.plan import plan_live
from composer.swap.snapshot import LiveRunning
from composer.swap.status import format_live, format_status
from composer.swap.transaction import Context, upstream_states
from tests.conftest import REPO, free_port

LIVE = """
[gateway]
live = ["baseline"]
[variants.baseline]
gpus = "0,1"
[variants.mtp]
gpus = "2,3"
[variants.dflash2]
gpus = "4,5"
"""


@pytest.fixture
def stack(tmp_path: Path) -> Stack:
    extra = tmp_path / "live.toml"
    extra.write_text(LIVE, encoding="utf-8")
    return load_stack([REPO / "composer.toml", extra], None, environ={})


def _running(stack: Stack, *names: str, changed: str = "") -> list[LiveRunning]:
    target = resolve_live(stack, list(dict.fromkeys(n.split("/")[0] for n in names)))
    rows = []
    for service in target.services:
        rows.append(
            LiveRunning(
                name=service.name,
                variant=service.member.variant,
                container=service.spec.container_name,
                gpus=service.member.gpus_text,
                config_hash="old" if service.name == changed else service.spec.hash,
                status="running",
                service=service.spec.compose_service,
            )
        )
    return rows


def _ops(plan) -> list[str]:
    """Each operation as `Type(how) member` (its case shown unless it is the type's own verb)."""
    return [
        f"{type(op).__name__}{f'({op.how})' * (op.how not in ('', type(op).__name__.lower()))} "
        f"{getattr(getattr(op, 'member', None), 'name', '')}".strip()
        for op in plan.ops
    ]


def test_joining_keeps_what_serves_and_starts_only_the_new_one(stack: Stack) -> None:
    running = _running(stack, "baseline/1")
    plan = plan_live(resolve_live(stack, ["baseline", "mtp"]), running, run_file="/s/live-x.yml")
    assert (plan.keep, plan.start, plan.leaving, plan.replace) == (("baseline/1",), ("mtp/1",), (), ())
    assert plan.mode == "join" and _ops(plan) == ["Start mtp/1", "Gate mtp/1", "Publish"]
    start, _, publish = plan.ops
    assert start.member.run_file == "/s/live-x.yml" and start.member.gpus == "2,3"
    assert [u["name"] for u in publish.upstreams] == ["baseline/1", "mtp/1"]
    assert [u["name"] for u in publish.previous] == ["baseline/1"]
    text = plan.describe()
    assert text.splitlines()[0] == "plan: {baseline/1} -> {baseline/1, mtp/1} (join)"
    assert "1. Start: start mtp/1 on GPUs 2,3 (vllm-mtp-1)" in text
    assert "3. Publish: route the gateway to {baseline/1, mtp/1}" in text
    assert "keep baseline/1: serves throughout" in text
    assert "Stop" not in text
    data = plan.as_data()
    assert data["mode"] == "join" and [o["op"] for o in data["operations"]] == [
        "Start",
        "Gate",
        "Publish",
    ]


def test_naming_the_set_stops_what_leaves_after_the_new_ones_serve(stack: Stack) -> None:
    running = _running(stack, "baseline/1", "mtp/1")
    plan = plan_live(resolve_live(stack, ["mtp", "dflash2"]), running)
    assert (plan.keep, plan.start, plan.leaving) == (("mtp/1",), ("dflash2/1",), ("baseline/1",))
    assert plan.mode == "replace"
    assert _ops(plan) == [
        "Start dflash2/1",
        "Gate dflash2/1",
        "Publish",
        "Publish",
        "Drain",
        "Stop baseline/1",
    ]
    assert [u["name"] for u in plan.ops[3].upstreams] == ["mtp/1", "dflash2/1"]
    assert plan.as_data()["leaving"] == ["baseline/1"]


def test_a_leaving_member_whose_gpus_a_new_one_needs_stops_first(stack: Stack) -> None:
    running = _running(stack, "baseline/1", "mtp/1")
    target = resolve_live(stack, ["baseline", "dflash2"])
    moved = [
        r if r.name != "mtp/1" else dataclasses.replace(r, gpus="4,5", run_file="/s/live-old.yml")
        for r in running
    ]
    plan = plan_live(target, moved)
    assert _ops(plan) == [
        "Publish",
        "Drain",
        "Stop mtp/1",
        "AwaitRelease",
        "Start dflash2/1",
        "Gate dflash2/1",
        "Publish",
    ]
    # Undone in reverse, the leaving member comes back: started, gated, published again.
    stop = plan.ops[2]
    assert [type(op).__name__ for op in stop.inverse()] == ["AwaitRelease", "Start", "Gate"]
    assert [u["name"] for u in plan.ops[0].inverse()[0].upstreams] == ["baseline/1", "mtp/1"]


def _single(config_hash: str, variant: str = "baseline"):
    from composer.engine.variant_container import RunningVariant

    return RunningVariant(
        "id",
        "p-vllm-1",
        variant,
        config_hash,
        "img",
        "running",
        None,
        None,
        None,
        "m",
        "/s/one.yml",
        0,
        service="vllm",
    )


def test_a_single_serving_variant_stops_only_once_the_set_serves(stack: Stack) -> None:
    single = _single("h")
    plan = plan_live(resolve_live(stack, ["baseline", "mtp"]), [], single)
    assert plan.mode == "join"
    assert _ops(plan)[-1] == "Stop baseline" and _ops(plan).count("Stop baseline") == 1
    assert plan.ops[-1].inverse()[1].member.run_file == "/s/one.yml"  # started again from its file
    first = plan_live(resolve_live(stack, ["baseline", "mtp"]), [], single, gpus_shared=True)
    # its GPUs are needed first: the gateway holds and drains (streams continue) before it
    # stops, and releases once the first member is routed
    assert _ops(first) == [
        "Hold",
        "Stop baseline",
        "AwaitRelease",
        "Start baseline/1",
        "Gate baseline/1",
        "Publish",
        "Release",
        "AwaitRelease",
        "Start mtp/1",
        "Gate mtp/1",
        "Publish",
    ]
    assert first.ops[0].continue_streams and first.ops[0].target == ""  # no switch-log variant
    assert first.ops[6].describe() == "release the held requests to the live set"
    drained = plan_live(
        resolve_live(stack, ["baseline", "mtp"]), [], single, gpus_shared=True, continue_streams=False
    )
    assert not drained.ops[0].continue_streams
    cold = plan_live(resolve_live(stack, ["mtp"]), [], single, gateway_running=False, gpus_shared=True)
    assert "Hold" not in _ops(cold)  # a gateway started now served nothing


def test_the_last_member_serving_is_held_and_drained_before_it_stops(stack: Stack) -> None:
    moved = [dataclasses.replace(r, gpus="4,5") for r in _running(stack, "mtp/1")]
    plan = plan_live(resolve_live(stack, ["baseline", "dflash2"]), moved)
    assert _ops(plan) == [
        "Hold",
        "Stop mtp/1",
        "Start baseline/1",
        "Gate baseline/1",
        "Publish",
        "Release",
        "AwaitRelease",
        "Start dflash2/1",
        "Gate dflash2/1",
        "Publish",
    ]
    # a changed sole member too: held before it stops, released once it serves again
    changed = plan_live(resolve_live(stack, ["mtp"]), _running(stack, "mtp/1", changed="mtp/1"))
    assert _ops(changed) == [
        "Hold",
        "Stop mtp/1",
        "AwaitRelease",
        "Start mtp/1",
        "Gate mtp/1",
        "Release",
    ]


def test_a_lone_variant_running_what_its_member_would_joins_the_set_as_it_runs(tmp_path: Path) -> None:
    extra = tmp_path / "live.toml"
    extra.write_text(LIVE.replace('live = ["baseline"]', ""), encoding="utf-8")
    stack = load_stack([REPO / "composer.toml", extra], None, environ={"GPU_DEVICES": "none"})
    target = resolve_live(stack, ["baseline", "mtp"])
    single = _single(target.services[0].alone_hash)
    assert single.config_hash  # the one serving baseline's hash, as `up baseline` labels it
    plan = plan_live(target, [], single)
    assert _ops(plan) == ["Start(adopt) baseline/1", "Start mtp/1", "Gate mtp/1", "Publish"]
    assert plan.keep == ("baseline/1",) and plan.leaving == () and plan.mode == "join"
    assert plan.ops[0].member.container == "p-vllm-1" and plan.ops[0].inverse() == ()
    publish = plan.ops[-1]
    assert publish.upstreams[0] == {"name": "baseline/1", "variant": "baseline", "url": "http://vllm:8000"}
    assert publish.inverse()[0].upstreams == ()  # undone: the gateway's single upstream again
    assert "Start: adopt p-vllm-1 as baseline/1 as it runs (not restarted)" in plan.describe()
    assert plan.as_data()["operations"][0]["op"] == "Start"
    assert plan.as_data()["operations"][0]["how"] == "adopt"
    # Once it serves in the set, the same set is a no-op; its upstream keeps its own service.
    member = LiveRunning("baseline/1", "baseline", "p-vllm-1", "0,1", single.config_hash, "running", "vllm")
    mtp = _running(stack, "mtp/1")
    same = plan_live(target, [member, *mtp], single)
    assert same.no_op and same.after == ("baseline/1", "mtp/1"), same.describe()
    assert member.member().upstream()["url"] == "http://vllm:8000"  # told the gateway again as it runs
    # Not adopted: another configuration, a set of itself alone, or no gateway running.
    assert "Stop baseline" in _ops(plan_live(target, [], _single("other")))
    assert _ops(plan_live(resolve_live(stack, ["baseline"]), [], single))[0] == "Start baseline/1"
    assert "Start(adopt) baseline/1" not in _ops(plan_live(target, [], single, gateway_running=False))


def test_a_lone_variant_on_other_gpus_than_its_member_cannot_join_as_it_runs(stack: Stack) -> None:
    target = resolve_live(stack, ["baseline", "mtp"])
    assert stack.gpus and set(stack.gpus) != {"0", "1"}
    assert target.services[0].alone_hash == ""


def test_a_changed_member_is_replaced_and_the_same_set_is_a_no_op(stack: Stack) -> None:
    running = _running(stack, "baseline/1", "mtp/1", changed="mtp/1")
    target = resolve_live(stack, ["baseline", "mtp"])
    changed = plan_live(target, running)
    assert changed.replace == ("mtp/1",)
    assert _ops(changed)[:3] == ["Publish", "Drain", "Stop mtp/1"]
    same = plan_live(target, _running(stack, "baseline/1", "mtp/1"))
    assert same.no_op and same.mode == "unchanged" and "nothing to change" in same.describe()
    assert plan_live(target, _running(stack, "baseline/1", "mtp/1"), gateway_running=False).start_gateway


def test_gateway_fields_absent_are_shown_as_dashes(stack: Stack) -> None:
    states = upstream_states({"upstreams": [{"name": "mtp/1", "ready": True, "outstanding": 3, "served": 9}]})
    assert states["mtp/1"]["outstanding"] == 3 and upstream_states({"upstream": "x"}) == {}
    rows = [
        {"name": "mtp/1", "container": "c1", "state": "running", "gpus": "2,3", "ready": True,
         "outstanding": 3, "served_last_minute": None, "served": 9, "errors": 0},
        {"name": "baseline/1", "container": "c2", "state": "running", "gpus": "0,1", "ready": None,
         "outstanding": None, "served_last_minute": None, "served": None, "errors": None},
    ]  # fmt: skip
    table = format_live(rows).splitlines()
    assert table[0].split() == [
        "LIVE", "CONTAINER", "STATE", "GPUS", "READY", "OUTSTANDING", "SERVED/1M", "SERVED", "ERRORS"
    ]  # fmt: skip
    assert table[1].split() == ["mtp/1", "c1", "running", "2,3", "yes", "3", "-", "9", "0"]
    assert table[2].split() == ["baseline/1", "c2", "running", "0,1", "-", "-", "-", "-", "-"]


def test_the_live_file_carries_the_optional_services_and_prometheus_scrapes_every_member(
    stack: Stack, tmp_path: Path
) -> None:
    import yaml

    from composer.render.live import render_live

    (file,) = render_live(resolve_live(stack, ["baseline", "mtp"]), tmp_path)
    rendered = yaml.safe_load(file.content)
    assert rendered["services"]["prometheus"]["profiles"] == ["prometheus"]
    assert rendered["services"]["follow"]["profiles"] == ["follow"]
    assert set(rendered["volumes"]) == {"gateway-state", "prometheus-data"}
    scrape = yaml.safe_load(rendered["configs"]["prometheus-config"]["content"])
    jobs = {job["job_name"]: job["static_configs"] for job in scrape["scrape_configs"]}
    assert [(c["targets"], c["labels"]["upstream"]) for c in jobs["vllm"]] == [
        (["vllm-baseline-1:8000"], "baseline/1"),
        (["vllm-mtp-1:8000"], "mtp/1"),
    ]
    assert jobs["vllm-composer-gateway"][0]["targets"] == ["gateway:8000"]


def test_a_live_set_says_whether_it_routes_by_class_or_by_load_alone() -> None:
    shipped = {"chat-1": "mtp", "long-16": "baseline"}
    assert live_routing(shipped, ["baseline", "mtp"]) == (
        True,
        "by workload class: chat-1 -> mtp, long-16 -> baseline",
    )
    by_class, line = live_routing(shipped, ["dflash2", "mtp-dsd"])
    assert not by_class and line.startswith("by load alone: no [workloads] class names a variant")
    rows = [
        {"name": "dflash2/1", "container": "c1", "state": "running", "gpus": "0", "ready": True,
         "outstanding": 0, "served_last_minute": 0, "served": 0, "errors": 0},
    ]  # fmt: skip
    text = format_status({"project": "p", "running": False, "live": rows, "routing": line})
    assert "\nrouting       by load alone: " in text
    # The one serving container that joined the set is shown as its member, not as a swap's variant.
    adopted = format_status(
        {"project": "p", "running": True, "container": "c1", "live": rows, "routing": line}
    )
    assert adopted.startswith("project p: live set of 1 container(s)")


def test_a_member_that_takes_a_leaving_ones_gpus_starts_once_they_are_released(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan's Stop, AwaitRelease, Start on Docker's dispatch table, with a
    recording GPU probe: the start comes after the probe saw the stopped process go."""
    from composer.engine.variant_container import VariantContainer
    from composer.probes import cgroups
    from composer.probes.gpu import GpuInfo, GpuProcess
    from composer.swap.execute import execute
    from composer.swap.ops import AwaitRelease, Member, Start, Stop
    from composer.swap.transaction import DockerSwap

    def gpu(index: int, pids: tuple[int, ...]) -> GpuInfo:
        used = (10 << 30) * len(pids)
        return GpuInfo(
            index,
            "H200",
            (9, 0),
            140 << 30,
            used,
            (140 << 30) - used,
            tuple(GpuProcess(p, "vllm") for p in pids),
        )

    class Probe:
        name, available, reason = "fake", True, ""

        def __init__(self) -> None:
            self.seen: list[bool] = []  # per call: the stopped process still listed

        def gpus(self) -> list[GpuInfo]:
            held = len(self.seen) < 3  # the snapshot before the stop, then two polls still holding
            self.seen.append(held)
            return [gpu(2, (4242,) if held else ()), gpu(3, ())]

    class Client:
        class containers:  # the SDK's collection
            @staticmethod
            def get(name: str) -> object:
                return type("C", (), {"id": "abc", "name": name})()

    stopped: list[str] = []
    monkeypatch.setattr(VariantContainer, "stop_and_remove", lambda self, grace: stopped.append(self.name))
    monkeypatch.setattr(cgroups, "container_pids", lambda ids: frozenset({4242}))
    ctx = Context(stack, Client(), UpOptions())  # type: ignore[arg-type]
    swapper = DockerSwap(ctx, UpResult("mtp", "planned"))
    swapper.probe = Probe()
    leaving = Member("mtp/1", "mtp", "vllm-mtp-1", "vllm-mtp-1", "/s/live-old.yml", "2,3")
    coming = Member("dflash2/1", "dflash2", "vllm-dflash2-1", "vllm-dflash2-1", "/s/live.yml", "2,3")
    started: list[list[bool]] = []
    handlers = swapper.handlers() | {Start: lambda op: started.append(list(swapper.probe.seen))}
    execute([Stop(leaving, live=True), AwaitRelease("2,3"), Start(coming, live=True)], handlers)
    assert stopped == ["vllm-mtp-1"]
    assert started == [[True, True, True, False]]  # started only after the release was seen


def test_a_live_change_runs_the_swaps_preflight_before_anything_stops(tmp_path: Path) -> None:
    from composer.errors import PreflightFailed
    from composer.swap.entry import started_targets
    from composer.swap.snapshot import Snapshot
    from composer.swap.swapper import preflight_warnings

    extra = tmp_path / "live.toml"
    extra.write_text(LIVE, encoding="utf-8")
    missing = tmp_path / "no-such-model"
    key = "Zq3vT9pL2xW7mK8rN4bH6jD1sF5gA0cE"
    environ = {
        "GPU_DEVICES": "none",
        "MODEL_DIR": str(missing),
        "VLLM_API_KEY": key,
        "VLLM_PORT": str(free_port()),
    }
    stack = load_stack([REPO / "composer.toml", extra], None, environ=environ)
    target = resolve_live(stack, ["baseline", "mtp"])
    plan = plan_live(target, _running(stack, "baseline/1"))
    ctx = Context(stack, None, UpOptions())  # type: ignore[arg-type]  # no Docker: the checks that need it are skipped
    with pytest.raises(PreflightFailed, match=f"preflight: model directory {missing}"):
        preflight_warnings(ctx, started_targets(stack, target, plan), Snapshot(stack.project, ()))
