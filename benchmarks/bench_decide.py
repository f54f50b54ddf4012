"""Switch or adapt, on the simulator: `bench --decide`'s arms measured, in its hybrid and
non-hybrid settings, side by side with the simulator model's own figures.

Run: python3 benchmarks/bench_decide.py [--time-scale 10] [--runs 2] [--max-tokens 320]

Each arm (baseline, MTP K=3 and K=7, mtp-dsd, mtp-adaptive) runs in its own local
simulator process (no Docker) with the speculative config `compose-spec render` writes
for it (composer.toml); the sweep's `measure_point` measures every
workload of `bench --decide` (prompts of 128 and 2000 tokens x 1, 2, 4, 8, 16, 32
streams), and `composer.bench.decide` takes the decision exactly as `bench --decide`
does. DFlash2 is left out: the simulator's base package needs the dflash overlay.
The switching arm needs the gateway and Docker: it is measured by `bench --decide` itself
(tests/bench/test_bench_decide_docker.py), not here.

These are MODEL figures: the simulator's timing model, calibrated on published numbers
(images/sim/README.md, "In-server adaptive speculation"). The command exists to be run
on a real GPU rig: `compose-spec bench --decide`.
Writes benchmarks/results/decide.json; prints both decision tables.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIM_SRC = REPO / "images" / "sim" / "src"
MODEL = REPO / "images" / "sim" / "models" / "Qwen3.8-27B"
RESULTS = REPO / "benchmarks" / "results"
KEY = "sk-bench-decide-0123456789abcdef"
sys.path[:0] = [str(REPO), str(SIM_SRC)]

from vllm.sim import adaptive  # noqa: E402
from vllm.sim.engine_types import SpecSetup  # noqa: E402
from vllm.sim.profiles import get_profile  # noqa: E402

from composer.bench import decide  # noqa: E402
from composer.bench.report import point_data  # noqa: E402
from composer.bench.sweep import BenchOptions, BenchPoint, measure_point  # noqa: E402
from composer.render.spec import resolve as resolve_text  # noqa: E402
from composer.render.spec import speculative_config  # noqa: E402
from composer.stack.load import load_stack  # noqa: E402
from tests.sim.simproc import serving  # noqa: E402

ARMS = (("baseline", 0), ("mtp", 3), ("mtp", 7), ("mtp-dsd", 7), ("mtp-adaptive", 7))


@contextmanager
def simulator(spec: dict | None, env_extra: dict[str, str], scale: float) -> Iterator[str]:
    """One arm's simulator; a refused configuration raises with the simulator's own line."""
    env = {"SIM_TIME_SCALE": str(scale), "SIM_LOAD_SECONDS": "0", **env_extra}
    with tempfile.TemporaryDirectory(prefix="bench-decide-") as logs, ExitStack() as running:
        try:
            url = running.enter_context(serving(spec, api_key=KEY, log_dir=Path(logs), env=env))
        except (RuntimeError, TimeoutError) as err:
            lines = [line for line in str(err).splitlines() if "ValueError:" in line or "Error:" in line]
            raise RuntimeError(
                lines[0].split(") ", 1)[-1] if lines else f"the simulator did not start for {spec}"
            ) from err
        yield url


def arm_spec(stack, variant: str, k: int) -> tuple[dict | None, dict[str, str]]:
    """The rendered speculative config (with the arm's K) and the variant's environment."""
    from dataclasses import replace

    var = stack.variant(variant)
    if var.speculative is not None:
        var = replace(var, speculative=replace(var.speculative, num_speculative_tokens=k))
    text = speculative_config(stack, var)
    spec = json.loads(resolve_text(text)) if text else None
    env = (
        {"VLLM_USE_V2_MODEL_RUNNER": "1"} if var.speculative and var.speculative.adaptive_verification else {}
    )
    return spec, env


def model_setup(spec: dict | None, env: dict[str, str], hybrid: bool) -> SpecSetup:
    if spec is None:
        return SpecSetup(hybrid=hybrid)
    schedule = spec.get("num_speculative_tokens_per_batch_size")
    v2 = env.get("VLLM_USE_V2_MODEL_RUNNER") == "1"
    return SpecSetup(
        spec["method"],
        spec["num_speculative_tokens"],
        None,
        tuple(map(tuple, schedule)) if schedule else None,
        bool(spec.get("enable_adaptive_verification")),
        piecewise=bool(schedule) and not v2,
        hybrid=hybrid,
    )


def run_setting(stack, hybrid: bool, options: BenchOptions, scale: float) -> dict:
    points, model, refused = [], {}, {}
    for variant, k in ARMS:
        spec, env = arm_spec(stack, variant, k)
        setup = model_setup(spec, env, hybrid)
        env = {**env, "SIM_HYBRID_MODEL": "1" if hybrid else "0"}
        label = variant if variant != "mtp" else f"mtp K={k}"
        try:
            server = simulator(spec, env, scale)
            url = server.__enter__()
        except RuntimeError as err:
            refused[label] = str(err)
            print(f"{'hybrid' if hybrid else 'plain '} {label}: refused: {err}", flush=True)
            continue
        try:
            for workload in options.workloads():
                result = measure_point(
                    BenchPoint(variant, spec["method"] if spec else None, k),
                    options,
                    base_url=url,
                    api_key=KEY,
                    served_name="m",
                    workload=workload,
                )
                data = point_data(result)
                # simulated seconds: the server runs `scale` times faster than the model
                data["aggregate_tok_s"] = (data["aggregate_tok_s"] or 0) / scale
                data["decode_tok_s"] = (data["decode_tok_s"] or 0) / scale
                for run in data["runs"]:
                    run["decode_tok_s"] /= scale
                    run["ttft_s"] *= scale
                points.append(data)
                key = f"{label} @ {workload.prompt_tokens} tok x {workload.concurrency}"
                running = min(workload.concurrency, data["max_running"] or workload.concurrency)
                model[key] = {
                    "decode_measured": round(data["decode_tok_s"] * running, 1),
                    "decode_model": round(
                        adaptive.aggregate_tok_s(get_profile(), setup, workload.concurrency), 1
                    ),
                    "aggregate_with_prefill": round(data["aggregate_tok_s"], 1),
                    "max_running": data["max_running"],
                }
                print(f"{'hybrid' if hybrid else 'plain '} {key}: {model[key]}", flush=True)
        finally:
            server.__exit__(None, None, None)
    return {"points": points, "model": model, "refused": refused}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-scale", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=320)
    args = parser.parse_args()
    stack = load_stack([REPO / "composer.toml"], env_file=None, environ={})
    plan = decide.ArmPlan(
        "baseline",
        ("mtp",),
        ("mtp-dsd", "mtp-adaptive"),
        {},
        ("dflash2-adaptive left out (no dflash overlay)",),
    )
    options = BenchOptions(
        prompts=(
            "Explain the trade-offs of speculative decoding.",
            "Write a short story about a lighthouse.",
        ),
        max_tokens=args.max_tokens,
        runs=args.runs,
        warmup=1,
        concurrency=decide.DECIDE_CONCURRENCY,
        prompt_tokens=decide.DECIDE_PROMPT_TOKENS,
    )
    out: dict = {"note": "simulator model figures, not GPU measurements", "settings": {}}
    tables = []
    for hybrid in (False, True):
        measured = run_setting(stack, hybrid, options, args.time_scale)
        decision = decide.decide({"points": measured["points"]}, plan)
        name = "hybrid" if hybrid else "non-hybrid"
        out["settings"][name] = {
            "decide": decide.decision_data(decision),
            "model_vs_measured": measured["model"],
            "refused_at_startup": measured["refused"],
        }
        refused = "".join(f"\nrefused at startup: {arm}: {why}" for arm, why in measured["refused"].items())
        tables.append(f"== simulator, {name} setting ==\n{decide.format_decision(decision)}{refused}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "decide.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print("\n\n".join(tables))
    gaps = sorted(
        abs(v["decode_measured"] / v["decode_model"] - 1)
        for s in out["settings"].values()
        for key, v in s["model_vs_measured"].items()
        if " @ 128 tok " in key
    )
    median, worst = gaps[len(gaps) // 2] * 100, gaps[-1] * 100
    print(
        f"\nmeasured vs model decode tok/s at 128-token prompts: median gap {median:.1f}%, largest {worst:.1f}%"
    )
    print("(the model is decode only: 2000-token prompts at many streams add prefill steps it leaves out;")
    print(" the decision uses the aggregate rate, prefill and first-token time included)")
    print("wrote benchmarks/results/decide.json (model figures; run `bench --decide` on a GPU rig)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
