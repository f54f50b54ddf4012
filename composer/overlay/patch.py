"""Apply validated diffs to file contents in memory, in pure Python (no git, no patch).

Hunks must match exactly (no fuzz); a hunk may move by an offset, like `patch` does.
Every hunk of every file is tried: one ImageBuildError then names each diff, file and hunk
that does not apply (and each file missing from, or already in, the base), so a base far
from the diff needs one run to see everything that differs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from unidiff import Hunk

from composer.overlay.diff import FileChange, ParsedDiff, problems_error

NO_NEWLINE = "\\"


def apply_diffs(base_files: Mapping[str, str | None], diffs: Iterable[ParsedDiff]) -> dict[str, str]:
    """Apply `diffs` in order to `base_files` (path -> text, None when absent): the new text of
    every file they touch, or one ImageBuildError listing every failing file and hunk."""
    tree: dict[str, str | None] = dict(base_files)
    touched: set[str] = set()
    failures: list[tuple[str, str]] = []  # (diff: file, problem)
    for diff in diffs:
        for change in diff.changes:
            tree[change.path] = _apply_change(tree.get(change.path), change, diff.name, failures)
            touched.add(change.path)
    if failures:
        files = len({where for where, _ in failures})
        where = f"in {files} file(s): the diffs do not apply to the base image"
        raise problems_error([line for _, line in failures], where)
    return {path: text for path in sorted(touched) if (text := tree[path]) is not None}


def _apply_change(
    original: str | None, change: FileChange, diff_name: str, failures: list[tuple[str, str]]
) -> str | None:
    """The text of one file after its hunks; each problem goes to `failures` as (`diff NAME:
    PATH`, line) and the hunks that apply are still applied."""
    where = f"diff {diff_name}: {change.path}"
    if change.is_new and original is not None:
        failures.append((where, f"{where}: the diff adds this file but the base image already has it"))
        return original
    if not change.is_new and original is None:
        failures.append((where, f"{where}: the diff edits this file but the base image does not have it"))
        return original
    lines = (original or "").splitlines(keepends=True)
    result: list[str] = []
    cursor = 0  # next unconsumed line of `lines`
    offset = 0  # how far hunks have moved from their stated positions so far
    for number, hunk in enumerate(change.patch, start=1):
        old, new = hunk_lines(hunk)
        wanted = (hunk.source_start if not old else hunk.source_start - 1) + offset
        at = _find(lines, old, wanted, cursor)
        if at is None:
            failures.append((where, _failure(where, number, len(change.patch), hunk, lines, new, wanted)))
            continue
        offset = at - (wanted - offset)
        result.extend(lines[cursor:at])
        result.extend(new)
        cursor = at + len(old)
    result.extend(lines[cursor:])
    return "".join(result)


def applies_in_reverse(base_files: Mapping[str, str | None], diffs: Iterable[ParsedDiff]) -> bool:
    """True when the base already holds what every diff leaves: each file the diffs touch is
    there and each hunk's resulting lines are found in it, in order (the change is in the base)."""
    checked = False
    for diff in diffs:
        for change in diff.changes:
            text = base_files.get(change.path)
            if text is None:
                return False
            lines, cursor = text.splitlines(keepends=True), 0
            for hunk in change.patch:
                _, new = hunk_lines(hunk)
                at = _find(lines, new, max(hunk.target_start - 1, cursor), cursor)
                if at is None:
                    return False
                cursor, checked = at + len(new), True
    return checked


def hunk_lines(hunk: Hunk) -> tuple[list[str], list[str]]:
    """The lines a hunk expects (context and removed) and the lines it leaves (context and added)."""
    old: list[str] = []
    new: list[str] = []
    previous = None
    for line in hunk:
        if line.line_type == NO_NEWLINE:
            if previous in (" ", "-") and old:
                old[-1] = old[-1].removesuffix("\n")
            if previous in (" ", "+") and new:
                new[-1] = new[-1].removesuffix("\n")
            continue
        if line.line_type in (" ", "-"):
            old.append(line.value)
        if line.line_type in (" ", "+"):
            new.append(line.value)
        previous = line.line_type
    return old, new


def _find(lines: list[str], old: list[str], wanted: int, cursor: int) -> int | None:
    """The position nearest to `wanted` (not before `cursor`) where `old` matches exactly."""
    size = len(old)
    last = len(lines) - size
    if not old:
        return wanted if cursor <= wanted <= len(lines) else None
    for distance in range(0, max(last - cursor, 0) + max(wanted - cursor, 0) + 2):
        for at in (wanted - distance, wanted + distance) if distance else (wanted,):
            if cursor <= at <= last and lines[at : at + size] == old:
                return at
        if wanted - distance < cursor and wanted + distance > last:
            break
    return None


def _failure(
    where: str, number: int, total: int, hunk: Hunk, lines: list[str], new: list[str], wanted: int
) -> str:
    header = f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@"
    reason = "does not match the base image's file"
    if new and _find(lines, new, max(wanted, 0), 0) is not None:
        reason += " (it looks applied already: does the base image contain this change?)"
    return f"{where}: hunk {number}/{total} {header} {reason}"
