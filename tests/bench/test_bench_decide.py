"""`bench --decide` (pure): the arms a stack offers and the decision on the simulator's model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from composer.bench import decide
from composer.bench.recommend import winners
from composer.stack.load import load_stack
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "images" / "sim" / "src"))
from vllm.sim import adaptive
from vllm.sim.engine_types import SpecSetup
from vllm.sim.profiles import get_profile

STACK = load_stack([REPO / "composer.toml", REPO / "adaptive.toml"], env_file=None, environ={})
SCHEDULE = ((1, 2, 7), (3, 8, 3), (9, 512, 0))


def _setups(hybrid: bool) -> dict[tuple[str, int], SpecSetup]:
    return {
        ("baseline", 0): SpecSetup(hybrid=hybrid),
        ("mtp", 3): SpecSetup("mtp", 3, hybrid=hybrid),
        ("mtp", 7): SpecSetup("mtp", 7, hybrid=hybrid),
        ("mtp-dsd", 7): SpecSetup("mtp", 7, None, SCHEDULE, piecewise=True, hybrid=hybrid),
        ("mtp-adaptive", 7): SpecSetup("mtp", 7, adaptive=True, hybrid=hybrid),
    }


def model_bench(hybrid: bool, concurrency=(1, 2, 4, 8, 16, 32), lengths=(128, 2000)) -> dict:
    """A bench JSON whose rates are the simulator model's (what an ideal run would measure)."""
    profile = get_profile()
    points = []
    for (variant, k), setup in _setups(hybrid).items():
        for length in lengths:
            for c in concurrency:
                rate = adaptive.aggregate_tok_s(profile, setup, c)
                running = min(c, adaptive.max_running(setup.method, hybrid, 256))
                runs = [{"decode_tok_s": rate / c, "ttft_s": 0.05, "e2e_s": 1.0, "completion_tokens": 64}]
                points.append(
                    {
                        "variant": variant,
                        "method": setup.method,
                        "k": k,
                        "prompt_tokens": length,
                        "concurrency": c,
                        "aggregate_tok_s": rate,
                        "max_running": running,
                        "runs": runs * 3,
                        "error": None,
                    }
                )
    return {"points": points, "swap_seconds": [20.0, 22.0, 24.0]}


def _plan() -> decide.ArmPlan:
    return decide.plan_arms(STACK, lambda ref: "dflash2" not in ref, ks=(3, 7))


def test_arms_are_plain_static_mtp_and_the_adaptive_variants_with_an_image() -> None:
    plan = _plan()
    assert plan.plain == "baseline" and plan.static == ("mtp",)
    assert plan.adaptive == ("mtp-dsd", "mtp-adaptive")
    assert plan.ks_by_variant == {"mtp": (3, 7), "mtp-dsd": (7,), "mtp-adaptive": (7,)}
    assert any("dflash2-adaptive left out" in n for n in plan.notes)
    with_image = decide.plan_arms(STACK, lambda ref: True)
    assert "dflash2-adaptive" in with_image.adaptive and with_image.ks_by_variant["mtp"] == (1, 3, 4, 7, 10)


def test_the_decision_reports_every_arm_side_by_side_with_switching() -> None:
    decision = decide.decide(model_bench(hybrid=False), _plan(), switch_s=22.0)
    static = [arm for arm in decision.trace if arm.startswith("mtp K=")]
    assert len(static) == 1  # the best static K only
    assert set(decision.trace) == {"baseline", *static, "mtp-dsd", "mtp-adaptive", decide.SWITCH}
    table = decide.format_decision(decision)
    assert (
        "mtp-dsd" in table
        and decide.SWITCH in table
        and table.rstrip().splitlines()[-2].startswith("decision:")
    )
    data = decide.decision_data(decision)
    assert data["decision"]["line"] == decision.line
    assert data["trace"]["switches"] == decision.switches == 2  # chat -> busy -> chat
    assert json.dumps(data)  # plain data
    cell = data["arms"]["mtp-adaptive"][0]
    assert {"tpot_p50_ms", "tpot_p95_ms", "ttft_p50_s", "ttft_p95_s", "max_running"} <= set(cell)


def test_trace_goodput_is_the_harmonic_combination_of_the_measured_rates() -> None:
    data = model_bench(hybrid=False)
    decision = decide.decide(data, _plan(), switch_s=0.0)
    profile = get_profile()
    rates = [adaptive.aggregate_tok_s(profile, SpecSetup(), c) for c in (1, 16, 1)]
    assert decision.trace["baseline"] == pytest.approx(3 / sum(1 / r for r in rates))
    assert decision.phases == [(128, 1), (2000, 16), (128, 1)]


def test_switching_is_pinned_unless_it_wins_by_more_than_two_percent() -> None:
    slow_switch = decide.decide(model_bench(hybrid=False), _plan(), switch_s=10_000.0)
    assert slow_switch.action == "pin" and slow_switch.line.startswith("pin ")
    free_switch = decide.decide(model_bench(hybrid=False), _plan(), switch_s=0.0)
    assert free_switch.trace[decide.SWITCH] >= max(
        v for k, v in free_switch.trace.items() if k != decide.SWITCH
    )
    if free_switch.action == "switch":
        assert free_switch.line.startswith("switch: +") and "over the best single variant" in free_switch.line


def test_hybrid_model_mtp_runs_fewer_sequences_and_baseline_wins_at_16() -> None:
    data = model_bench(hybrid=True)
    decision = decide.decide(data, _plan(), switch_s=22.0)
    at16 = {arm: cells[(2000, 16)] for arm, cells in decision.arms.items()}
    assert at16["mtp K=7"].max_running == 3 < at16["baseline"].max_running == 16
    best_at_16 = max(at16, key=lambda a: at16[a].aggregate_tok_s)
    assert best_at_16 == "baseline"
    assert decision.by_concurrency[16] == "baseline"
    assert decision.by_concurrency[1] != "baseline"
    assert "[3]" in decide.format_decision(decision)


def test_recommend_treats_adaptive_variants_as_candidates() -> None:
    data = model_bench(hybrid=False, concurrency=(1, 8, 32), lengths=(128,))
    chosen = {w.workload: w.variant for w in winners(data)}
    assert set(chosen.values()) <= set(STACK.variants)
    assert chosen["chat-32"] in {"baseline", "mtp-dsd", "mtp-adaptive"}


def test_the_plot_and_json_are_written(tmp_path: Path) -> None:
    decision = decide.decide(model_bench(hybrid=False), _plan(), switch_s=22.0)
    written = decide.write_decision(decision, tmp_path)
    assert tmp_path / decide.JSON_FILE in written
    assert json.loads((tmp_path / decide.JSON_FILE).read_text())["decision"]["line"] == decision.line


def test_an_interrupted_run_without_a_whole_trace_decides_nothing() -> None:
    data = model_bench(hybrid=False, concurrency=(1,), lengths=(128,))
    data["points"] = [p for p in data["points"] if p["variant"] == "baseline"]
    data["options"] = {"prompt_tokens": [128, 2000], "concurrency": [1, 16]}
    decision = decide.decide(data, _plan(), switch_s=1.0)
    assert decision.action == "none" and decision.line.startswith("no decision:")
    assert "decision: no decision" in decide.format_decision(decision)
    assert decide.decision_data(decision)["decision"]["action"] == "none"
