"""Benchmark output: a text table, JSON, CSV and optional PNG plots (matplotlib).

A single-stream run with the prompts as given gets the plain table and one plot (tok/s
against K); a run over several workloads adds workload, aggregate and percentile columns
and one plot per concurrency (aggregate tok/s against prompt length).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from composer.bench.sweep import BenchPoint, BenchReport, PointResult, Workload, rounded

JSON_FILE = "bench.json"
CSV_FILE = "bench.csv"
PNG_FILE = "bench.png"
JSON_ONLY = ("wall_s", "max_running", "drafts", "draft_tokens", "accepted", "first_difference")
"""The point fields the CSV leaves out; it keeps every other one, in the JSON's order."""


def point_data(result: PointResult) -> dict[str, Any]:
    acc = result.acceptance
    agreement = result.agreement
    return {
        "variant": result.point.variant,
        "method": result.point.method,
        "k": result.point.k,
        "prompt_tokens": result.workload.prompt_tokens,
        "concurrency": result.workload.concurrency,
        "decode_tok_s": rounded(result.decode_tok_s, 2),
        "aggregate_tok_s": rounded(result.aggregate_tok_s, 2),
        "wall_s": rounded(result.wall_s),
        "max_running": result.max_running,
        "tokens_per_iteration": rounded(result.tokens_per_iteration if result.ok else None),
        "acceptance_rate": rounded(acc.rate) if acc else None,
        "per_position": [round(p, 4) for p in acc.per_position] if acc else [],
        "drafts": acc.drafts if acc else 0,
        "draft_tokens": acc.draft_tokens if acc else 0,
        "accepted": acc.accepted if acc else 0,
        "ttft_s": rounded(result.ttft_s),
        "ttft_p95_s": rounded(result.ttft_p95_s),
        "e2e_s": rounded(result.e2e_s),
        "e2e_p95_s": rounded(result.e2e_p95_s),
        "speedup": rounded(result.speedup, 3),
        "aggregate_speedup": rounded(result.aggregate_speedup, 3),
        "agreement_percent": rounded(agreement.percent, 2) if agreement else None,
        "first_difference": agreement.first_difference if agreement else None,
        "deterministic": result.deterministic,
        "runs": [
            {
                "decode_tok_s": round(r.decode_tok_s, 2),
                "ttft_s": round(r.ttft_s, 4),
                "e2e_s": round(r.e2e_s, 4),
                "completion_tokens": r.completion_tokens,
                "prompt_tokens": r.prompt_tokens,
            }
            for r in result.runs
        ],
        "error": result.error,
    }


def report_data(report: BenchReport) -> dict[str, Any]:
    """bench.json's content."""
    options = report.options
    return {
        "options": {
            "max_tokens": options.max_tokens,
            "runs": options.runs,
            "warmup": options.warmup,
            "prompts": len(options.prompts),
            "concurrency": list(options.concurrency),
            "prompt_tokens": list(options.prompt_tokens),
        },
        "points": [point_data(r) for r in report.results],
        "best_k": {name: r.point.k for name, r in report.best_k().items()},
        "hints": list(report.hints),
        "notes": list(report.notes),
        "interrupted": report.interrupted or None,
        "swap_seconds": [round(s, 3) for s in report.swap_seconds],
        "metadata": dict(report.metadata),
    }


def fmt(value: float | None, pattern: str) -> str:
    """`value` in `pattern`, `-` when unknown."""
    return "-" if value is None else pattern.format(value)


def _positions(result: PointResult) -> str:
    if not result.acceptance:
        return "-"
    probs = [f"{p:.2f}".lstrip("0") or "0" for p in result.acceptance.per_position]
    return "/".join(probs[:8]) + ("/..." if len(probs) > 8 else "")


def table_rows(report: BenchReport) -> list[list[str]]:
    """The text table's rows, header first."""
    wide = report.options.multi
    header = ["variant", "K", "tok/s", "tok/iter", "accept", "p0..", "TTFT ms", "e2e s", "speed-up", "agree"]
    if wide:
        header[2:2] = ["prompt", "streams", "agg tok/s"]
        header[header.index("TTFT ms")] = "TTFT p50/p95 ms"
        header[header.index("e2e s")] = "e2e p50/p95 s"
        header.insert(header.index("speed-up") + 1, "agg speed-up")
    rows = [header]
    for r in report.results:
        where = [_prompt(r.workload), str(r.workload.concurrency), ""] if wide else []
        if not r.ok:
            row = [r.point.variant, str(r.point.k or "-"), *where[:2], str(r.error)]
            rows.append(row + [""] * (len(header) - len(row)))
            continue
        det = {True: "", False: " (not deterministic)", None: ""}[r.deterministic]
        reference = r is report.baseline(r.workload)
        agree = ("ref" if reference else fmt(r.agreement.percent, "{:.2f}%") if r.agreement else "-") + det
        ttft = fmt(None if r.ttft_s is None else r.ttft_s * 1000, "{:.0f}")
        e2e = fmt(r.e2e_s, "{:.2f}")
        if wide:
            where[2] = fmt(r.aggregate_tok_s, "{:.1f}")
            ttft += "/" + fmt(None if r.ttft_p95_s is None else r.ttft_p95_s * 1000, "{:.0f}")
            e2e += "/" + fmt(r.e2e_p95_s, "{:.2f}")
        row = [
            r.point.variant,
            str(r.point.k or "-"),
            *where,
            fmt(r.decode_tok_s, "{:.1f}"),
            f"{r.tokens_per_iteration:.2f}",
            fmt(r.acceptance.rate if r.acceptance else None, "{:.2f}"),
            _positions(r),
            ttft,
            e2e,
            fmt(r.speedup, "{:.2f}x"),
        ]
        if wide:
            row.append(fmt(r.aggregate_speedup, "{:.2f}x"))
        rows.append([*row, agree])
    return rows


def _prompt(workload: Workload) -> str:
    return "as given" if workload.prompt_tokens is None else str(workload.prompt_tokens)


def format_table(report: BenchReport) -> str:
    """The table, the best K per method, hints and notes, as text."""
    rows = table_rows(report)
    widths = [max(len(row[i]) for row in rows if len(row[i]) < 40) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    scope = f" ({report.first_workload().label})" if report.options.multi else ""
    for name, best in report.best_k().items():
        speed = fmt(best.speedup, " ({:.2f}x baseline)")
        lines.append(f"best K for {name}: {best.point.k} at {best.decode_tok_s:.1f} tok/s{speed}{scope}")
    lines += [f"hint: {h}" for h in report.hints]
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def csv_text(report: BenchReport) -> str:
    """One CSV row per point; per-position acceptance joined with `/`."""
    buffer = io.StringIO()
    fields = [f for f in point_data(PointResult(BenchPoint("", None, 0))) if f not in JSON_ONLY]
    writer = csv.DictWriter(buffer, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for data in (point_data(r) for r in report.results):
        data["per_position"] = "/".join(str(p) for p in data["per_position"])
        data["runs"] = len(data["runs"])
        writer.writerow(data)
    return buffer.getvalue()


def y_limits(report: BenchReport) -> tuple[float, float]:
    """The plot's y range: from 0 (speed-ups read honestly) to a little above the fastest point."""
    rates = [r.decode_tok_s for r in report.results if r.ok and r.decode_tok_s]
    return 0.0, (max(rates) * 1.1 if rates else 1.0)


def pyplot() -> Any:
    """matplotlib's pyplot on its file-only backend (Agg), None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_figure(plt: Any, figure: Any, path: Path) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _k_plot(plt: Any, report: BenchReport, path: Path) -> None:
    figure, axes = plt.subplots(figsize=(7, 4.5))
    by_variant: dict[str, list[PointResult]] = {}
    for r in report.results:
        if r.ok and r.point.k:
            by_variant.setdefault(r.point.variant, []).append(r)
    for name, results in by_variant.items():
        results.sort(key=lambda r: r.point.k)
        axes.plot([r.point.k for r in results], [r.decode_tok_s for r in results], marker="o", label=name)
    base = report.baseline()
    if base is not None and base.decode_tok_s:
        axes.axhline(base.decode_tok_s, color="grey", linestyle="--", label=f"{base.point.variant}")
    axes.set(ylim=y_limits(report), xlabel="K (num_speculative_tokens)", title="Decode speed against K")
    axes.set_ylabel("decode tok/s (median, warm)")
    axes.grid(True, alpha=0.3)
    axes.legend()
    save_figure(plt, figure, path)


def _concurrency_plot(plt: Any, report: BenchReport, concurrency: int, path: Path) -> None:
    workloads = report.options.workloads()
    lengths = list(dict.fromkeys(_prompt(w) for w in workloads if w.concurrency == concurrency))
    lines: dict[str, dict[str, float]] = {}
    for r in report.results:
        if r.ok and r.workload.concurrency == concurrency and r.aggregate_tok_s:
            lines.setdefault(r.point.label, {})[_prompt(r.workload)] = r.aggregate_tok_s
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for label, rates in lines.items():
        xs = [i for i, length in enumerate(lengths) if length in rates]
        axes.plot(xs, [rates[lengths[i]] for i in xs], marker="o", label=label)
    axes.set_xticks(range(len(lengths)), lengths)
    top = max((v for rates in lines.values() for v in rates.values()), default=1.0)
    axes.set(ylim=(0.0, top * 1.1), xlabel="prompt tokens", ylabel="aggregate tok/s (all streams)")
    axes.set_title(f"Aggregate throughput at {concurrency} concurrent stream(s)")
    axes.grid(True, alpha=0.3)
    if lines:
        axes.legend()
    save_figure(plt, figure, path)


def write_outputs(report: BenchReport, out_dir: Path) -> list[Path]:
    """Write JSON, CSV and (with matplotlib) bench.png or, over workloads, `bench-c<N>.png`s."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out_dir / JSON_FILE, out_dir / CSV_FILE
    plt = pyplot()
    plots = []
    if plt is None:
        report.notes.append("plot skipped: matplotlib is not installed (pip install '.[plot]')")
    elif not report.options.multi:
        plots.append(out_dir / PNG_FILE)
        _k_plot(plt, report, plots[-1])
    else:
        for concurrency in dict.fromkeys(report.options.concurrency):
            plots.append(out_dir / f"bench-c{concurrency}.png")
            _concurrency_plot(plt, report, concurrency, plots[-1])
    json_path.write_text(json.dumps(report_data(report), indent=2) + "\n", encoding="utf-8")
    csv_path.write_text(csv_text(report), encoding="utf-8")
    return [json_path, csv_path, *plots]
