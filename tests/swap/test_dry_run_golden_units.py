"""The plans `up --dry-run` and `down --dry-run` print, one `Plan` each, pinned as text and
JSON (golden files in `golden/`): a cold switch, a wake, a live join, a live set's gateway
settings applied in place, one variant replacing a live set, the last member serving held
before it stops, `down` of a live set and `up --recreate-gateway` on it. A change
to what `--dry-run` says shows here first; `GOLDEN_UPDATE=1` writes the files again (then
the docs that quote a plan change with them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from composer.engine.containers import upstream_url
from composer.render.live import resolve_live
from composer.swap.down import plan_down
from composer.swap.gateway_port import recreate_plan
from composer.swap.ops import Member
from composer.swap.plan import Bring, GatewayChange, Plan, decide, plan_alone, plan_live
from tests.swap.test_desired import _alone, _stack
from tests.swap.test_down_units import _live_set, _owned_stack, _owner
from tests.swap.test_live_plan import _running
from tests.swap.test_plan_units import _info, _snap
from tests.swap.test_standby_units import _stack as _switch_stack

GOLDEN = Path(__file__).parent / "golden"
ALIASES = GatewayChange("", (("GATEWAY_ALIASES", "fast=baseline"),), ("GATEWAY_ALIASES",))


def _switch(target: str, *, asleep: bool):
    stack = _switch_stack("stack.standby=sleep")
    mtp = _info("mtp", service="vllm-mtp", sleep_mode=True)
    infos = [mtp]
    answers = {upstream_url(mtp.name): False}
    if asleep:
        baseline = _info("baseline", service="vllm-baseline", sleep_mode=True, policy="no")
        infos.append(baseline)
        answers[upstream_url(baseline.name)] = True
    snap = _snap(stack, infos, route=upstream_url(mtp.name), answers=answers)
    member = Member(target, target, f"p-vllm-{target}-1", f"vllm-{target}", f"/s/{target}-h.yml", "all")
    sleeps = {n: v.standby == "sleep" for n, v in stack.variants.items()}
    bring = Bring(member, gateway=True, settle=2.0, warmup=2)
    return decide(
        snap, target, "h", target_sleeps=True, sleeps_in_stack=sleeps, current_ready=True, bring=bring
    )


def _plans(tmp_path: Path) -> dict[str, Plan]:
    stack = _stack(tmp_path)
    join = resolve_live(stack, ["baseline", "mtp"])
    owned = _owned_stack()
    alone, digest = _alone(stack, "baseline", gpus="all")
    return {
        "switch": _switch("baseline", asleep=False),
        "wake": _switch("baseline", asleep=True),
        "live-join": plan_live(join, _running(stack, "baseline/1"), run_file="/s/live-x.yml"),
        "live-settings": plan_live(join, _running(stack, "baseline/1", "mtp/1"), gateway=ALIASES),
        "alone-replaces-set": plan_alone(alone, digest, _running(stack, "baseline/1", "mtp/1"), "p"),
        "live-last-member-changed": plan_live(
            resolve_live(stack, ["mtp"]), _running(stack, "mtp/1", changed="mtp/1"), run_file="/s/live-y.yml"
        ),
        "down": plan_down(_live_set(owned, _owner(owned)), owned, 60, ("p_gateway-state",)),
        "recreate-gateway": recreate_plan(_live_set(owned, None), "/s/live-x.yml", "http://127.0.0.1:8000"),
    }


@pytest.mark.parametrize(
    "name",
    [
        "switch",
        "wake",
        "live-join",
        "live-settings",
        "alone-replaces-set",
        "live-last-member-changed",
        "down",
        "recreate-gateway",
    ],
)
def test_the_dry_run_plan_is_the_pinned_one(tmp_path: Path, name: str) -> None:
    plan = _plans(tmp_path)[name]
    said = plan.describe() + "\n\n" + json.dumps(plan.as_data(), indent=1, sort_keys=True) + "\n"
    golden = GOLDEN / f"{name}.txt"
    if os.environ.get("GOLDEN_UPDATE"):
        golden.write_text(said, encoding="utf-8")
    assert said == golden.read_text(encoding="utf-8")


def test_every_plan_has_one_json_shape_and_one_text_format(tmp_path: Path) -> None:
    shapes = {name: set(plan.as_data()) for name, plan in _plans(tmp_path).items()}
    assert len({frozenset(keys) for keys in shapes.values()}) == 1, shapes  # the same keys, every plan
    for name, plan in _plans(tmp_path).items():
        data = json.loads(json.dumps(plan.as_data()))
        assert {"mode", "serving", "target", "leaving", "operations", "notes", "refused"} <= set(data)
        ops = plan.ops
        assert [o["op"] for o in data["operations"]] == [type(op).__name__ for op in ops]
        assert plan.describe().startswith("plan: {")
        numbered = [line for line in plan.describe().splitlines() if line.startswith("  1. ")]
        assert numbered == [f"  1. {type(ops[0]).__name__}: {ops[0].describe()}"], name
