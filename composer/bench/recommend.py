"""Which variant to serve for which workload class, from a benchmark's JSON, and the
`[workloads]` block that says so.

Class names are `stack.workload_classes`' (the length spelled out when a run measured two
in one bucket). A class's winner is the point with the highest aggregate tok/s (old reports:
single-stream decode rate, as `chat-1`); its margin is over the best other variant and over
the baseline. `write_workloads` edits the `[workloads]` table as text, keeping every other
line; parsed back, the file may differ in those keys only, and is replaced atomically.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from composer.bench.report import JSON_FILE
from composer.bench.sweep import point_label, rounded
from composer.errors import ConfigError, UsageError
from composer.stack.bounded import BENCH_FILE_LIMIT, read_bounded, read_named_text, replace_file
from composer.stack.model import Stack
from composer.stack.workload_classes import CHAT_MAX_TOKENS, MEDIUM_MAX_TOKENS

CLOSE_MARGIN = 1.05
"""A win by less than this is flagged `close`: within run-to-run noise of a short sweep."""


@dataclass(frozen=True)
class Win:
    """The point that won one workload class, and by how much."""

    workload: str
    prompt_tokens: int | None
    concurrency: int
    variant: str
    k: int
    aggregate_tok_s: float
    runner_up: str | None
    """The best point of any other variant (`baseline`, `dflash2 K=7`), None when alone."""
    margin: float | None
    """Winner's aggregate rate over the runner-up's."""
    over_baseline: float | None
    """Winner's aggregate rate over the baseline's in the same class (None without one)."""

    @property
    def label(self) -> str:
        return point_label(self.variant, self.k)

    @property
    def margin_text(self) -> str:
        """`1.20x baseline`, flagged `(close)` under CLOSE_MARGIN; empty without a runner-up."""
        if self.margin is None or not self.runner_up:
            return ""
        return f"{self.margin:.2f}x {self.runner_up}" + (" (close)" if self.margin < CLOSE_MARGIN else "")

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "aggregate_tok_s": round(self.aggregate_tok_s, 2),
            "margin": rounded(self.margin, 3),
            "over_baseline": rounded(self.over_baseline, 3),
        }


def read_bench(path: str | Path) -> dict[str, Any]:
    """A benchmark's JSON (bench.json or the folder holding it); UsageError if unreadable."""
    if Path(path).is_dir():
        folder, path = path, Path(path) / JSON_FILE
        if not path.is_file():
            raise UsageError(
                f"no {JSON_FILE} in {str(folder)!r}: run `compose-spec bench --out {folder}` first"
            )
    try:
        data = json.loads(read_bounded(path, "benchmark results file", BENCH_FILE_LIMIT))
    except OSError as err:
        raise UsageError(
            f"cannot read the benchmark results {str(path)!r}: {err.strerror} "
            "(run `compose-spec bench` first)"
        ) from err
    except (ValueError, RecursionError) as err:
        raise UsageError(f"{str(path)!r} is not a benchmark's JSON: {err}") from err
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        raise UsageError(f"{str(path)!r} is not a benchmark's JSON: it has no list of points")
    return data


def bucket(prompt_tokens: int | None) -> str:
    """`chat` (<= 512 tokens or the prompts as given), `medium` (<= 4096) or `long`."""
    if prompt_tokens is None or prompt_tokens <= CHAT_MAX_TOKENS:
        return "chat"
    return "medium" if prompt_tokens <= MEDIUM_MAX_TOKENS else "long"


def class_name(cell: tuple[int | None, int], spelled: bool = True) -> str:
    """The class of a (prompt tokens, streams) cell, its length `spelled` out (`medium2000-16`)."""
    tokens, streams = cell
    length = ("as-given" if tokens is None else str(tokens)) if spelled else ""
    return f"{bucket(tokens)}{length}-{streams}"


def class_names(cells: Sequence[tuple[int | None, int]]) -> dict[tuple[int | None, int], str]:
    """The class name of each cell; a length is spelled out where its bucket holds two."""
    lengths: dict[str, set[int | None]] = {}
    for tokens, _ in cells:
        lengths.setdefault(bucket(tokens), set()).add(tokens)
    return {cell: class_name(cell, len(lengths[bucket(cell[0])]) > 1) for cell in cells}


def _rate(point: Mapping[str, Any]) -> float | None:
    rate = point.get("aggregate_tok_s", point.get("decode_tok_s"))
    return float(rate) if isinstance(rate, int | float) and rate > 0 else None


def winners(data: Mapping[str, Any]) -> list[Win]:
    """The winner of every workload class measured (in the order the classes were measured)."""
    cells: dict[tuple[int | None, int], list[Mapping[str, Any]]] = {}
    for point in data.get("points") or ():
        if not isinstance(point, dict) or point.get("error") or _rate(point) is None:
            continue
        cell = (point.get("prompt_tokens"), int(point.get("concurrency") or 1))
        cells.setdefault(cell, []).append(point)
    if not cells:
        raise UsageError("the benchmark results hold no measured point: nothing to recommend")
    names = class_names(list(cells))
    wins = []
    for cell, points in cells.items():
        ranked = sorted(points, key=lambda p: _rate(p) or 0.0, reverse=True)
        best = ranked[0]
        rate = _rate(best) or 0.0
        other = next((p for p in ranked if p["variant"] != best["variant"]), None)
        base = next((p for p in ranked if int(p.get("k") or 0) == 0), None)
        wins.append(
            Win(
                workload=names[cell],
                prompt_tokens=cell[0],
                concurrency=cell[1],
                variant=str(best["variant"]),
                k=int(best.get("k") or 0),
                aggregate_tok_s=rate,
                runner_up=point_label(str(other["variant"]), int(other.get("k") or 0)) if other else None,
                margin=rate / (_rate(other) or rate) if other else None,
                over_baseline=rate / (_rate(base) or rate) if base else None,
            )
        )
    return wins


def workloads_lines(wins: Sequence[Win]) -> list[str]:
    """`key = "variant"  # why` lines."""
    lines = []
    for w in wins:
        why = [f"K={w.k}" if w.k else "no speculation", f"{w.aggregate_tok_s:.1f} tok/s", w.margin_text]
        lines.append(f'{w.workload} = "{w.variant}"  # {", ".join(p for p in why if p)}')
    return lines


def workloads_block(wins: Sequence[Win]) -> str:
    """The proposed `[workloads]` table as TOML text."""
    return "\n".join(["[workloads]", *workloads_lines(wins)]) + "\n"


_TABLE = re.compile(r"^\s*\[\s*workloads\s*\]\s*(#.*)?$")
_ANY_TABLE = re.compile(r"^\s*\[")
_KEY = re.compile(r"""^\s*(?P<q>["']?)(?P<key>[A-Za-z0-9_-]+)(?P=q)\s*=""")


def updated_stack_text(text: str, wins: Sequence[Win]) -> str:
    """The stack file's text with the recommended keys in its `[workloads]` table; ConfigError
    when it is not TOML, sets `workloads` in another form, or the edit would change more."""
    try:
        original = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"the stack file is not valid TOML: {err}") from err
    proposed = {w.workload: w.variant for w in wins}
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if _TABLE.match(line.rstrip("\r\n"))]
    if len(starts) > 1:
        raise ConfigError("the stack file has more than one [workloads] table: edit it by hand")
    if not starts:
        if "workloads" in original:
            raise ConfigError("the stack file sets workloads without a [workloads] table: edit it by hand")
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines += ["\n", "[workloads]\n"]
        starts = [len(lines) - 1]
    start = starts[0]
    end = next((i for i in range(start + 1, len(lines)) if _ANY_TABLE.match(lines[i])), len(lines))
    new_lines = dict(zip(proposed, workloads_lines(wins), strict=True))
    last = start
    for i in range(start + 1, end):
        match = _KEY.match(lines[i])
        if match and match["key"] in new_lines:
            lines[i] = new_lines.pop(match["key"]) + "\n"
        if lines[i].strip() and not lines[i].lstrip().startswith("#"):
            last = i
    lines[last + 1 : last + 1] = [line + "\n" for line in new_lines.values()]
    result = "".join(lines)
    try:
        parsed = tomllib.loads(result)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(
            f"the [workloads] table could not be edited safely ({err}): edit it by hand"
        ) from err
    if parsed != {**original, "workloads": {**original.get("workloads", {}), **proposed}}:
        raise ConfigError("the [workloads] table could not be edited safely: edit it by hand")
    return result


def write_workloads(path: str | Path, wins: Sequence[Win]) -> None:
    """Put the recommended keys into the stack file's `[workloads]` table, atomically."""
    path = Path(path)
    updated = updated_stack_text(read_named_text(path, "stack file"), wins)
    replace_file(path, updated.encode("utf-8"), path.stat().st_mode & 0o7777)


def format_wins(wins: Sequence[Win]) -> str:
    rows = [["workload", "prompt", "streams", "winner", "agg tok/s", "margin", "vs baseline"]]
    for w in wins:
        rows.append(
            [
                w.workload,
                "as given" if w.prompt_tokens is None else str(w.prompt_tokens),
                str(w.concurrency),
                w.label,
                f"{w.aggregate_tok_s:.1f}",
                w.margin_text or "-",
                "-" if w.over_baseline is None else f"{w.over_baseline:.2f}x",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(n) for c, n in zip(r, widths, strict=True)).rstrip() for r in rows)


def check_against_stack(wins: Sequence[Win], stack: Stack) -> list[str]:
    """Refuse (ConfigError) winners the stack does not define; the notes where a winner's K
    differs from the one its variant is configured with."""
    unknown = sorted({w.variant for w in wins} - set(stack.variants))
    if unknown:
        raise ConfigError(
            f"the benchmark measured variant(s) {', '.join(unknown)} that the stack does not define; "
            "known: " + ", ".join(sorted(stack.variants))
        )
    notes = []
    for w in wins:
        spec = stack.variants[w.variant].speculative
        if w.k and spec is not None and spec.num_speculative_tokens != w.k:
            notes.append(
                f"{w.workload}: {w.variant} won with K={w.k} but the stack runs it with "
                f"K={spec.num_speculative_tokens} "
                f"(set variants.{w.variant}.speculative.num_speculative_tokens = {w.k} to serve what won)"
            )
    return notes
