"""`bench --decide`: switch containers, or pin one server that adapts its speculation?

The arms: the plain variant, the best static MTP K, each in-server adaptive variant (one
whose image is missing is left out) and switching between the plain variant and the best
speculative arm. The single arms are swept over every workload; the decision is taken on
a phase-changing trace (short prompts at 1 stream, long ones at many, short again; the
same tokens per phase), where a single arm's goodput is the trace's tokens over the time
its measured rates need. Switching is measured, never computed (`switch_run`); without
that run there is no switching arm. Pure: reads the bench JSON and the run's data.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from composer.bench.report import fmt, pyplot, save_figure
from composer.bench.sweep import DEFAULT_KS, latency, median, point_label, rounded
from composer.stack.bounded import replace_file
from composer.stack.model import Stack
from composer.stack.values import MTP_METHODS

DECIDE_CONCURRENCY = (1, 2, 4, 8, 16, 32)
DECIDE_PROMPT_TOKENS = (128, 2000)
PIN_MARGIN = 0.02
"""Switching must beat the best single arm by more than this to be worth its switches."""
SWITCH = "switching"
JSON_FILE = "decide.json"
PNG_FILE = "decide.png"


@dataclass(frozen=True)
class ArmPlan:
    """What `bench --decide` sweeps: variants, the Ks of each, and what it left out."""

    plain: str | None
    static: tuple[str, ...]
    adaptive: tuple[str, ...]
    ks_by_variant: dict[str, tuple[int, ...]]
    notes: tuple[str, ...] = ()

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(v for v in (self.plain, *self.static, *self.adaptive) if v)


def is_adaptive(stack: Stack, name: str) -> bool:
    """True for a variant that adapts its speculation inside the server."""
    spec = stack.variant(name).speculative
    return spec is not None and (spec.per_batch_size is not None or spec.adaptive_verification)


def plan_arms(stack: Stack, image_exists: Callable[[str], bool], ks: Sequence[int] | None = None) -> ArmPlan:
    """The arms this stack offers (pure but for `image_exists`, the local image check)."""
    plain = next((n for n, v in stack.variants.items() if v.speculative is None), None)
    static = tuple(
        n
        for n, v in stack.variants.items()
        if v.speculative is not None and v.speculative.method in MTP_METHODS and not is_adaptive(stack, n)
    )
    adaptive: list[str] = []
    notes: list[str] = []
    for name in stack.variants:
        if not is_adaptive(stack, name):
            continue
        variant = stack.variant(name)
        image = stack.image(variant.image_key)
        if variant.refused:
            notes.append(f"{name} left out: {variant.refused}")
        elif image_exists(image):
            adaptive.append(name)
        else:
            notes.append(f"{name} left out: its image {image} is not present (build it to include it)")
    sweep = tuple(sorted(set(ks or DEFAULT_KS)))
    ks_by_variant = {n: sweep for n in static}
    ks_by_variant |= {n: (s.num_speculative_tokens,) for n in adaptive if (s := stack.variant(n).speculative)}
    if plain is None:
        notes.append("no variant without speculation: the switching arm needs one")
    return ArmPlan(plain, static, tuple(adaptive), ks_by_variant, tuple(notes))


@dataclass
class ArmStats:
    """One arm at one workload; `latency` as `sweep.latency` gives it."""

    aggregate_tok_s: float
    max_running: int | None
    latency: dict[str, float | None]


@dataclass
class Decision:
    """The table, the trace and the one-line decision."""

    arms: dict[str, dict[tuple[int | None, int], ArmStats]]
    trace: dict[str, float]
    switches: int
    switch_s: float
    held_s: float
    action: str
    variant: str
    gain: float
    line: str
    phases: list[tuple[int | None, int]] = field(default_factory=list)
    switch_arms: tuple[str, str] | None = None
    by_concurrency: dict[int, str] = field(default_factory=dict)
    """The best single arm at each concurrency (over the prompt lengths, harmonic mean)."""
    switching: dict[str, Any] | None = None
    """The measured switching run (`SwitchRun.data`), when one ran."""
    predicted_switching: float | None = None
    """Switching's goodput as the single arms and the measured switch times predict it."""


def _stats(point: Mapping[str, Any]) -> ArmStats:
    runs = point.get("runs") or []
    return ArmStats(
        float(point.get("aggregate_tok_s") or point.get("decode_tok_s") or 0.0),
        point.get("max_running"),
        latency(
            [r.get("decode_tok_s") for r in runs], [r["ttft_s"] for r in runs if r.get("ttft_s") is not None]
        ),
    )


def _workloads(arms: Mapping[str, Mapping[tuple[int | None, int], ArmStats]]) -> list[tuple[int | None, int]]:
    return sorted({w for cells in arms.values() for w in cells}, key=lambda w: (w[0] or 0, w[1]))


def trace_phases(workloads: Sequence[tuple[int | None, int]]) -> list[tuple[int | None, int]]:
    """Short prompts at the lowest concurrency, long ones at up to 16 streams, short again."""
    lengths = sorted({w[0] for w in workloads}, key=lambda t: -1 if t is None else t)
    streams = sorted({w[1] for w in workloads})
    chat = (lengths[0], streams[0])
    busy = max((s for s in streams if s <= 16), default=streams[-1])
    return [chat, (lengths[-1], busy), chat]


def decide(
    data: Mapping[str, Any],
    plan: ArmPlan,
    switching: Mapping[str, Any] | None = None,
    trace_tokens: float = 10_000.0,
) -> Decision:
    """The decision over `plan`'s arms and the switching run (None: none); ValueError: none measured."""
    static = set(plan.static)
    arms: dict[str, dict[tuple[int | None, int], ArmStats]] = {}
    for point in data.get("points", []):
        if point.get("error") or not point.get("runs"):
            continue
        workload = (point.get("prompt_tokens"), int(point.get("concurrency") or 1))
        name = point_label(point["variant"], point["k"]) if point["variant"] in static else point["variant"]
        arms.setdefault(str(name), {})[workload] = _stats(point)
    workloads = _workloads(arms)
    if not workloads:
        raise ValueError("no arm was measured: nothing to decide")
    options = data.get("options") or {}
    planned = [(t, c) for t in options.get("prompt_tokens") or [] for c in options.get("concurrency") or []]
    phases = trace_phases(planned or workloads)  # what was asked for, even when interrupted
    complete = {a: cells for a, cells in arms.items() if all(p in cells for p in phases)}

    def goodput(by_phase: Sequence[str], extra_s: float = 0.0) -> float:
        rates = [complete[a][p].aggregate_tok_s for a, p in zip(by_phase, phases, strict=True)]
        seconds = sum(trace_tokens / r if r > 0 else float("inf") for r in rates)
        return len(phases) * trace_tokens / (seconds + extra_s)

    def alone(arm: str) -> float:
        return goodput([arm] * len(phases))

    best_static = max((a for a in complete if a.split(" K=")[0] in static), key=alone, default=None)
    singles = [a for a in complete if a.split(" K=")[0] not in static or a == best_static]
    trace = {a: alone(a) for a in singles}
    if not trace:  # interrupted before any arm covered the trace's workloads
        shown = " -> ".join(_cell(p) for p in phases)
        line = f"no decision: no arm was measured at every workload of the trace ({shown})"
        return Decision(arms, {}, 0, 0.0, 0.0, "none", "", 0.0, line, phases)
    best = max(trace, key=lambda a: trace[a])
    switches, held, switch_s, predicted = 0, 0.0, 0.0, None
    switch_arms: tuple[str, str] | None = None
    speculative = [a for a in singles if a != plan.plain]
    if plan.plain is not None and plan.plain in complete and speculative:
        switch_arms = (plan.plain, max(speculative, key=lambda a: trace[a]))
    # a run cut short (Ctrl-C) is kept in the data but not compared: it covers part of the trace
    if switching is not None and switching.get("complete", True) and switching.get("goodput_tok_s"):
        trace[SWITCH] = float(switching["goodput_tok_s"])
        switches = int(switching.get("switches") or 0)
        held = float(switching.get("held_request_s") or 0.0)
        switch_s = float(median(switching.get("switch_s") or []) or 0.0)
        if switch_arms is not None:
            chosen = [max(switch_arms, key=lambda a: complete[a][p].aggregate_tok_s) for p in phases]
            predicted_switches = sum(1 for a, b in itertools.pairwise(chosen) if a != b)
            predicted = goodput(chosen, predicted_switches * switch_s)
    gain = trace.get(SWITCH, 0.0) / trace[best] - 1.0
    if SWITCH in trace and gain > PIN_MARGIN:
        action, variant = "switch", SWITCH
        line = f"switch: +{gain * 100:.0f}% over the best single variant ({best}) on this trace"
    else:
        action, variant = "pin", best.split(" K=")[0]
        if SWITCH in trace:
            within = f"within {PIN_MARGIN * 100:.0f}% of switching" if gain > 0 else "beats switching"
            line = f"pin {best} ({within}, no switches)"
        elif switching is not None:
            line = f"pin {best} (the switching run was interrupted: not compared)"
        else:
            line = f"pin {best} (no switching arm measured)"
    by_concurrency = {}
    for streams in sorted({w[1] for w in workloads}):
        cells = [w for w in workloads if w[1] == streams]
        scores = {
            a: len(cells) / sum(1 / max(arms[a][w].aggregate_tok_s, 1e-9) for w in cells)
            for a in singles
            if all(w in arms[a] for w in cells)
        }
        if scores:
            by_concurrency[streams] = max(scores, key=lambda a: scores[a])
    return Decision(
        arms,
        trace,
        switches,
        switch_s,
        held,
        action,
        variant,
        gain,
        line,
        phases,
        switch_arms,
        by_concurrency,
        dict(switching) if switching is not None else None,
        predicted,
    )


def _cell(w: tuple[int | None, int]) -> str:
    return f"{'as given' if w[0] is None else w[0]} tok x {w[1]}"


def format_decision(decision: Decision) -> str:
    """Aggregate tok/s per arm and workload, the trace's goodput, then the decision."""
    # switching is measured on the trace only: no column of its own
    names = [a for a in decision.arms if a in decision.trace] or list(decision.arms)
    width = max([12, *(len(n) for n in names)])
    lines = ["workload".ljust(18) + "".join(n.rjust(width + 2) for n in names)]
    for w in _workloads(decision.arms):
        row = _cell(w).ljust(18)
        for name in names:
            stats = decision.arms[name].get(w)
            text = "-"
            if stats is not None:
                text = f"{stats.aggregate_tok_s:.1f}"
                if stats.max_running is not None and stats.max_running < w[1]:
                    text += f" [{stats.max_running}]"
            row += text.rjust(width + 2)
        lines.append(row)
    lines.append("")
    trace = " -> ".join(_cell(p) for p in decision.phases)
    lines.append(f"trace ({trace}), goodput tok/s:")
    for name, rate in sorted(decision.trace.items(), key=lambda item: -item[1]):
        extra = ""
        if name == SWITCH and decision.switching is not None:
            run = decision.switching
            arms = " <-> ".join(run.get("arms") or decision.switch_arms or ())
            tpot = "/".join(fmt(run.get(f"tpot_{q}_ms"), "{:.1f}") for q in ("p50", "p95"))
            ttft = "/".join(fmt(run.get(f"ttft_{q}_s"), "{:.2f}") for q in ("p50", "p95"))
            extra = (
                f"  measured ({arms}, {decision.switches} switch(es), median {decision.switch_s:.1f} s, "
                f"requests held up to {decision.held_s:.1f} s; TPOT p50/p95 {tpot} ms, TTFT p50/p95 {ttft} s)"
            )
        lines.append(f"  {name:<{width}}  {rate:8.1f}{extra}")
    best = ", ".join(f"{c}: {arm}" for c, arm in decision.by_concurrency.items())
    lines.append(f"best single arm per concurrency: {best}")
    lines.append("")
    lines.append(f"decision: {decision.line}")
    lines.append("[n]: /metrics showed at most n sequences running at once (fewer than the streams sent)")
    return "\n".join(lines)


def decision_data(decision: Decision) -> dict[str, Any]:
    """decide.json's content."""

    def cell(stats: ArmStats) -> dict[str, Any]:
        times = {k: rounded(v, 2 if k.startswith("tpot") else 4) for k, v in stats.latency.items()}
        return {"aggregate_tok_s": round(stats.aggregate_tok_s, 2), **times, "max_running": stats.max_running}

    return {
        "arms": {
            name: [
                {"prompt_tokens": w[0], "concurrency": w[1], **cell(s)}
                for w, s in sorted(cells.items(), key=lambda i: (i[0][0] or 0, i[0][1]))
            ]
            for name, cells in decision.arms.items()
        },
        "trace": {
            "phases": [{"prompt_tokens": p[0], "concurrency": p[1]} for p in decision.phases],
            "goodput_tok_s": {name: round(rate, 2) for name, rate in decision.trace.items()},
            "switches": decision.switches,
            "switch_s": round(decision.switch_s, 3),
            "held_request_s": round(decision.held_s, 3),
            "switch_arms": list(decision.switch_arms) if decision.switch_arms else None,
            "switching_predicted_tok_s": rounded(decision.predicted_switching, 2),
            "switching_run": decision.switching,
        },
        "best_by_concurrency": {str(c): arm for c, arm in decision.by_concurrency.items()},
        "decision": {
            "action": decision.action,
            "variant": decision.variant,
            "gain_of_switching": round(decision.gain, 4),
            "line": decision.line,
        },
    }


def write_decision(decision: Decision, out_dir: Path) -> list[Path]:
    """decide.json and, with matplotlib, decide.png (tok/s against concurrency per prompt length)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / JSON_FILE
    replace_file(path, (json.dumps(decision_data(decision), indent=2) + "\n").encode("utf-8"), 0o644)
    plt = pyplot()
    if plt is None:
        return [path]
    lengths = sorted({w[0] for cells in decision.arms.values() for w in cells}, key=lambda t: t or 0)
    figure, axes = plt.subplots(1, len(lengths), figsize=(6 * len(lengths), 4.5), squeeze=False)
    for axis, length in zip(axes[0], lengths, strict=True):
        for name, cells in decision.arms.items():
            points = sorted((w[1], s.aggregate_tok_s) for w, s in cells.items() if w[0] == length)
            if points:
                axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
        axis.set_xscale("log", base=2)
        axis.set(xlabel="concurrent streams", ylabel="aggregate tok/s")
        axis.set_title("prompts as given" if length is None else f"{length} prompt tokens")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize="small")
    figure.suptitle(decision.line)
    save_figure(plt, figure, out_dir / PNG_FILE)
    return [path, out_dir / PNG_FILE]


def image_present(ref: str) -> bool:
    """True when the image is present locally (arms without one are left out)."""
    from composer.engine.client import docker_client
    from composer.engine.images import image_facts

    try:
        client = docker_client()
    except Exception:  # no Docker: the swaps will say so
        return True
    try:
        return image_facts(client, "vllm", ref).present is True
    finally:
        client.close()
