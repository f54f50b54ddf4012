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

STACK = load_stack([REPO / "composer.toml"], env_file=None, environ={})
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


def _run(goodput: float, switches: int = 2, held: float = 21.5) -> dict:
    """A measured switching run as `SwitchRun.data` gives it."""
    return {
        "arms": ["baseline", "mtp K=7"],
        "goodput_tok_s": goodput,
        "switches": switches,
        "switch_s": [20.0, 24.0][:switches],
        "held_request_s": held,
        "tpot_p50_ms": 17.0,
        "tpot_p95_ms": 60.0,
        "ttft_p50_s": 0.1,
        "ttft_p95_s": 9.0,
    }


def test_the_decision_reports_every_arm_side_by_side_with_switching() -> None:
    decision = decide.decide(model_bench(hybrid=False), _plan(), _run(50.0))
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
    assert data["trace"]["switches"] == decision.switches == 2  # as measured
    assert data["trace"]["held_request_s"] == 21.5 and data["trace"]["switch_s"] == 22.0  # the median
    assert data["trace"]["switching_run"]["tpot_p95_ms"] == 60.0
    assert "measured (baseline <-> mtp K=7, 2 switch(es)" in table and "TTFT p50/p95 0.10/9.00 s" in table
    # the prediction from the single arms: each phase on the better arm, plus the switch times
    assert 0 < data["trace"]["switching_predicted_tok_s"] < max(decision.trace.values()) * 2
    assert json.dumps(data)  # plain data
    cell = data["arms"]["mtp-adaptive"][0]
    assert {"tpot_p50_ms", "tpot_p95_ms", "ttft_p50_s", "ttft_p95_s", "max_running"} <= set(cell)


def test_trace_goodput_is_the_harmonic_combination_of_the_measured_rates() -> None:
    data = model_bench(hybrid=False)
    decision = decide.decide(data, _plan())
    profile = get_profile()
    rates = [adaptive.aggregate_tok_s(profile, SpecSetup(), c) for c in (1, 16, 1)]
    assert decision.trace["baseline"] == pytest.approx(3 / sum(1 / r for r in rates))
    assert decision.phases == [(128, 1), (2000, 16), (128, 1)]


def test_switching_is_pinned_unless_its_measured_goodput_wins_by_more_than_two_percent() -> None:
    data = model_bench(hybrid=False)
    best = max(decide.decide(data, _plan()).trace.values())
    assert decide.SWITCH not in decide.decide(data, _plan()).trace  # not measured: no arm
    assert decide.decide(data, _plan()).line.endswith("(no switching arm measured)")
    close = decide.decide(data, _plan(), _run(best * 1.01))
    assert close.action == "pin" and "within 2% of switching" in close.line
    slower = decide.decide(data, _plan(), _run(best * 0.5))
    assert slower.action == "pin" and "beats switching" in slower.line
    cut = decide.decide(data, _plan(), _run(best * 1.2) | {"complete": False, "interrupted": "interrupted"})
    assert decide.SWITCH not in cut.trace and cut.line.endswith(
        "(the switching run was interrupted: not compared)"
    )
    assert decide.decision_data(cut)["trace"]["switching_run"]["interrupted"] == "interrupted"  # kept
    faster = decide.decide(data, _plan(), _run(best * 1.2))
    assert faster.action == "switch" and faster.line.startswith("switch: +20% over the best single variant")


def test_hybrid_model_mtp_runs_fewer_sequences_and_baseline_wins_at_16() -> None:
    data = model_bench(hybrid=True)
    decision = decide.decide(data, _plan(), _run(60.0))
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
    decision = decide.decide(model_bench(hybrid=False), _plan(), _run(50.0))
    written = decide.write_decision(decision, tmp_path)
    assert tmp_path / decide.JSON_FILE in written
    assert json.loads((tmp_path / decide.JSON_FILE).read_text())["decision"]["line"] == decision.line


def test_an_interrupted_run_without_a_whole_trace_decides_nothing() -> None:
    data = model_bench(hybrid=False, concurrency=(1,), lengths=(128,))
    data["points"] = [p for p in data["points"] if p["variant"] == "baseline"]
    data["options"] = {"prompt_tokens": [128, 2000], "concurrency": [1, 16]}
    decision = decide.decide(data, _plan())
    assert decision.action == "none" and decision.line.startswith("no decision:")
    assert "decision: no decision" in decide.format_decision(decision)
    assert decide.decision_data(decision)["decision"]["action"] == "none"


def test_the_switching_run_maps_each_trace_cell_to_the_faster_arm_and_turns_the_policy_on() -> None:
    from dataclasses import replace as dc_replace

    from composer.bench import switch_run

    decision = decide.decide(model_bench(hybrid=True), _plan())
    plain, spec = decision.switch_arms
    assert plain == "baseline" and spec.startswith("mtp")

    def rate(arm, cell):
        return decision.arms[arm][cell].aggregate_tok_s

    table = switch_run.policy_workloads(decision.phases, rate, (plain, spec), {plain: plain, spec: "mtp"})
    assert table == {
        "chat128-1": "mtp",
        "chat128-16": "baseline",
        "medium2000-1": "mtp",
        "medium2000-16": "baseline",
    }
    stack = switch_run.switching_stack(STACK, table)
    assert stack.gateway.policy == "auto" and stack.workloads == table
    assert stack.gateway.policy_window == switch_run.POLICY_WINDOW_S
    assert STACK.gateway.policy == "manual"  # the user's stack is not changed
    from composer.stack.workload_classes import gateway_workloads

    assert "medium2000-16:513:4096:2000:16=baseline" in gateway_workloads(stack.workloads)
    assert dc_replace(stack, workloads={}).workloads == {}


def test_a_switching_run_reports_goodput_switches_and_the_held_requests() -> None:
    from composer.bench.client import StreamResult
    from composer.bench.switch_run import SwitchRun, TraceRequest

    def done(ttft: float, tokens: int = 100) -> StreamResult:
        return StreamResult("x", tokens, 10, ttft, ttft + 1.0, 1.0, tokens)

    run = SwitchRun(("baseline", "mtp K=7"), {"chat128-1": "mtp"})
    run.requests = [
        TraceRequest(0, 1.0, done(0.1)),
        TraceRequest(1, 5.0, done(4.0)),  # sent while the switch ran: held
        TraceRequest(1, 9.0, done(0.2)),
        TraceRequest(1, 9.5, None, "POST /v1/chat/completions answered 503"),
    ]
    run.switches = [(4.5, 8.5, "baseline")]
    run.seconds = 10.0
    data = run.data()
    assert data["goodput_tok_s"] == 30.0 and data["failed_requests"] == 1
    assert data["switches"] == 1 and data["switch_s"] == [4.0] and data["held_request_s"] == 4.0
    assert data["ttft_p50_s"] == 0.2 and data["tpot_p50_ms"] == pytest.approx(1000 / 99, abs=1e-3)
