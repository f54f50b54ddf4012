"""Benchmark output: a text table, JSON, CSV and an optional PNG plot (matplotlib)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from composer.bench.sweep import BenchReport, PointResult

JSON_FILE = "bench.json"
CSV_FILE = "bench.csv"
PNG_FILE = "bench.png"
CSV_FIELDS = (
    "variant",
    "method",
    "k",
    "decode_tok_s",
    "tokens_per_iteration",
    "acceptance_rate",
    "per_position",
    "ttft_s",
    "e2e_s",
    "speedup",
    "agreement_percent",
    "deterministic",
    "runs",
    "error",
)


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def point_data(result: PointResult) -> dict[str, Any]:
    """One point as plain data."""
    acc = result.acceptance
    agreement = result.agreement
    return {
        "variant": result.point.variant,
        "method": result.point.method,
        "k": result.point.k,
        "decode_tok_s": _round(result.decode_tok_s, 2),
        "tokens_per_iteration": _round(result.tokens_per_iteration if result.ok else None),
        "acceptance_rate": _round(acc.rate) if acc else None,
        "per_position": [round(p, 4) for p in acc.per_position] if acc else [],
        "drafts": acc.drafts if acc else 0,
        "ttft_s": _round(result.ttft_s),
        "e2e_s": _round(result.e2e_s),
        "speedup": _round(result.speedup, 3),
        "agreement_percent": _round(agreement.percent, 2) if agreement else None,
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
    """The whole report as plain data (the JSON file's content)."""
    options = report.options
    return {
        "options": {
            "max_tokens": options.max_tokens,
            "runs": options.runs,
            "warmup": options.warmup,
            "prompts": len(options.prompts),
        },
        "points": [point_data(r) for r in report.results],
        "best_k": {name: r.point.k for name, r in report.best_k().items()},
        "hints": list(report.hints),
        "notes": list(report.notes),
        "interrupted": report.interrupted or None,
        "metadata": dict(report.metadata),
    }


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def _positions(result: PointResult, shown: int = 8) -> str:
    if not result.acceptance:
        return "-"
    probs = [f"{p:.2f}".lstrip("0") or "0" for p in result.acceptance.per_position]
    return "/".join(probs[:shown]) + ("/..." if len(probs) > shown else "")


def table_rows(report: BenchReport) -> list[list[str]]:
    """Rows of the text table, header first."""
    rows = [["variant", "K", "tok/s", "tok/iter", "accept", "p0..", "TTFT ms", "e2e s", "speed-up", "agree"]]
    for r in report.results:
        if not r.ok:
            rows.append([r.point.variant, str(r.point.k or "-"), str(r.error), *[""] * 7])
            continue
        det = {True: "", False: " (not deterministic)", None: ""}[r.deterministic]
        reference = r is report.baseline()
        agree = ("ref" if reference else _fmt(r.agreement.percent, "{:.2f}%") if r.agreement else "-") + det
        rows.append(
            [
                r.point.variant,
                str(r.point.k or "-"),
                _fmt(r.decode_tok_s, "{:.1f}"),
                f"{r.tokens_per_iteration:.2f}",
                _fmt(r.acceptance.rate if r.acceptance else None, "{:.2f}"),
                _positions(r),
                _fmt(None if r.ttft_s is None else r.ttft_s * 1000, "{:.0f}"),
                _fmt(r.e2e_s, "{:.2f}"),
                _fmt(r.speedup, "{:.2f}x"),
                agree,
            ]
        )
    return rows


def format_table(report: BenchReport) -> str:
    """The table, the best K per method, hints and notes, as text."""
    rows = table_rows(report)
    widths = [max(len(row[i]) for row in rows if len(row[i]) < 40) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    for name, best in report.best_k().items():
        speed = _fmt(best.speedup, " ({:.2f}x baseline)")
        lines.append(f"best K for {name}: {best.point.k} at {best.decode_tok_s:.1f} tok/s{speed}")
    lines += [f"hint: {h}" for h in report.hints]
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def csv_text(report: BenchReport) -> str:
    """One CSV row per point; per-position acceptance joined with `/`."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
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


def write_plot(report: BenchReport, path: Path) -> bool:
    """tok/s against K per method, baseline as a horizontal line; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
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
    axes.set_ylim(y_limits(report))
    axes.set_xlabel("K (num_speculative_tokens)")
    axes.set_ylabel("decode tok/s (median, warm)")
    axes.set_title("Decode speed against K")
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def write_outputs(report: BenchReport, out_dir: Path) -> list[Path]:
    """Write JSON, CSV and (when possible) the PNG; note a skipped plot in the report."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path, png_path = out_dir / JSON_FILE, out_dir / CSV_FILE, out_dir / PNG_FILE
    written = [json_path, csv_path]
    if write_plot(report, png_path):
        written.append(png_path)
    else:
        report.notes.append("plot skipped: matplotlib is not installed (pip install '.[plot]')")
    json_path.write_text(json.dumps(report_data(report), indent=2) + "\n", encoding="utf-8")
    csv_path.write_text(csv_text(report), encoding="utf-8")
    return written
