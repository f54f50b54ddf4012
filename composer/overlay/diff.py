"""Read and validate a vendored diff before anything is built.

A diff is usable as an overlay when it parses as a unified diff and every file it keeps
is a relative path inside the package (no `..`, not absolute) that it adds or edits as
text: Python files and data files alike (.py, .json, .yaml, .txt, ...). Refused inside the
package: native sources (C/C++/CUDA, Cython: an overlay cannot compile), binary patches,
symlinks, submodules, renames and deletions. The recipe's `skip` globs drop paths whatever
their type (tests, docs, a binary under docs/). Every problem of every file is reported
in one error.

Paths: by default git's `a/` and `b/` prefixes are removed and the rest is relative to the
package's parent folder (`a/vllm/config/vllm.py`), like `patch -p1` at the repository
root. A diff with `strip = N` is taken like `patch -pN` run inside the package folder: N
leading components are removed and the rest is relative to the package
(`a/config/vllm.py` with `strip = 1` is `vllm/config/vllm.py`).
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

from unidiff import PatchedFile, PatchSet
from unidiff.errors import UnidiffParseError

from composer.errors import ImageBuildError

DEV_NULL = "/dev/null"
MODULE_SUFFIX = ".py"
NATIVE_SUFFIXES = frozenset(
    {".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".cu", ".cuh", ".so", ".pyx", ".pxd"}
)
SYMLINK_MODE = "120000"
GITLINK_MODE = "160000"


@dataclass(frozen=True)
class FileChange:
    """One file a diff changes: its path relative to the package's parent folder."""

    path: str
    patch: PatchedFile

    @property
    def is_new(self) -> bool:
        return self.patch.source_file == DEV_NULL


@dataclass(frozen=True)
class ParsedDiff:
    """A validated diff: its name, sha256, the changes to apply and the paths skipped."""

    name: str
    sha256: str
    changes: tuple[FileChange, ...]
    skipped: tuple[str, ...] = ()


def sha256_hex(data: bytes) -> str:
    """The lowercase hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def parse_diff(
    name: str, data: bytes, package: str, skip: tuple[str, ...] = (), strip: int | None = None
) -> ParsedDiff:
    """Parse and validate a diff; raise one ImageBuildError naming every offending file."""
    diff, problems = read_diff(name, data, package, skip, strip)
    if diff is None:
        raise problems_error(problems, f"in diff {name}")
    return diff


def read_diff(
    name: str, data: bytes, package: str, skip: tuple[str, ...] = (), strip: int | None = None
) -> tuple[ParsedDiff | None, list[str]]:
    """The validated diff, or None and every problem found in it (one line each)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        return None, [f"diff {name}: not UTF-8 text ({err.reason} at byte {err.start})"]
    try:
        patch_set = PatchSet(text)
    except UnidiffParseError as err:
        return None, [f"diff {name}: does not parse as a unified diff: {err}"]
    if not patch_set:
        return None, [f"diff {name}: contains no file changes"]
    changes: list[FileChange] = []
    skipped: list[str] = []
    problems: list[str] = []
    for patched in patch_set:
        try:
            path = _check_file(name, patched, package, skip, strip)
        except ImageBuildError as err:
            problems.append(str(err))
            continue
        if path is None:
            skipped.append(_display(patched, package, strip))
        else:
            changes.append(FileChange(path, patched))
    if not changes and not problems:
        problems.append(f"diff {name}: every file is skipped; nothing would change in {package}/")
    if problems:
        return None, problems
    return ParsedDiff(name, sha256_hex(data), tuple(changes), tuple(skipped)), []


def problems_error(problems: list[str], where: str) -> ImageBuildError:
    """One error for every problem: the problem itself, or a count and one line per problem."""
    if len(problems) == 1:
        return ImageBuildError(problems[0])
    return ImageBuildError(f"{len(problems)} problems {where}:\n" + "\n".join(f"  {p}" for p in problems))


def added_modules(diffs: Iterable[ParsedDiff]) -> list[str]:
    """Dotted names of the Python modules the diffs add (`vllm/a/b.py` -> `vllm.a.b`)."""
    found: list[str] = []
    for diff in diffs:
        for change in diff.changes:
            path = PurePosixPath(change.path)
            if not change.is_new or path.suffix != MODULE_SUFFIX:
                continue
            parts = [*path.parent.parts, path.stem] if path.stem != "__init__" else list(path.parent.parts)
            if all(part.isidentifier() for part in parts) and ".".join(parts) not in found:
                found.append(".".join(parts))
    return found


def check_pin(diff: ParsedDiff, pinned: str, hint: str) -> None:
    """Refuse a diff whose sha256 is not the recipe's pin; `hint` says how to re-pin."""
    if not pinned:
        raise ImageBuildError(
            f"diff {diff.name} is not pinned (sha256 {diff.sha256}): review it, then {hint}"
        )
    if pinned != diff.sha256:
        raise ImageBuildError(
            f"diff {diff.name} changed: sha256 is {diff.sha256}, the recipe pins {pinned}: "
            f"review it, then {hint}"
        )


def _check_file(
    name: str, patched: PatchedFile, package: str, skip: tuple[str, ...], strip: int | None
) -> str | None:
    """The validated path of one file change, or None when a skip glob drops it."""
    where = f"diff {name}: {_display(patched, package, strip)}"
    sources = [p for p in (patched.source_file, patched.target_file) if p and p != DEV_NULL]
    written = [_stripped(where, p, strip) for p in sources]
    paths = written if strip is None else [f"{package}/{p}" for p in written]
    if any(fnmatch.fnmatchcase(path, glob) for path in {*written, *paths} for glob in skip):
        return None
    outside = [p for p in paths if len(PurePosixPath(p).parts) < 2 or PurePosixPath(p).parts[0] != package]
    if outside and strip is None:
        raise ImageBuildError(
            f"{where}: outside the package {package}/; if the diff's paths are relative to the package "
            f"(like a/config/x.py), set strip = 1 in its [[diffs]] table (like `patch -p1` inside "
            f"{package}/); else add the path to the recipe's skip list if it is not needed at runtime"
        )
    if outside:
        raise ImageBuildError(
            f"{where}: outside the package {package}/; check strip = {strip} in its [[diffs]] table, "
            "or add the path to the recipe's skip list"
        )
    if patched.is_binary_file:
        raise ImageBuildError(
            f"{where}: a binary file inside {package}/; an overlay applies only text patches"
        )
    if patched.is_symlink or SYMLINK_MODE in (patched.source_mode, patched.target_mode):
        raise ImageBuildError(f"{where}: symlinks (git mode 120000) are not allowed in an overlay")
    if GITLINK_MODE in (patched.source_mode, patched.target_mode):
        raise ImageBuildError(f"{where}: submodules are not allowed in an overlay")
    for path in paths:
        if PurePosixPath(path).suffix.lower() in NATIVE_SUFFIXES:
            raise ImageBuildError(
                f"{where}: native source (C/C++/CUDA/Cython); the overlay cannot compile, "
                "it only adds or edits Python and data files"
            )
    if len(set(paths)) > 1:
        raise ImageBuildError(f"{where}: renames are not supported; the overlay only adds or edits files")
    if patched.target_file == DEV_NULL:
        raise ImageBuildError(f"{where}: deletes a file; an overlay image cannot delete files")
    if not patched:
        raise ImageBuildError(f"{where}: has no hunks (mode-only changes are not supported)")
    return paths[0]


def _stripped(where: str, raw: str, strip: int | None) -> str:
    """The path as the diff writes it, without git's a/ b/ prefix (or `strip` components)."""
    if raw.startswith('"'):
        raise ImageBuildError(f"{where}: quoted path {raw} (unusual characters) is not allowed")
    if "\\" in raw or (len(raw) > 1 and raw[1] == ":"):
        raise ImageBuildError(f"{where}: path {raw!r} is not a relative POSIX path")
    if raw.startswith("/"):
        raise ImageBuildError(f"{where}: absolute path {raw!r} is not allowed")
    if strip is None:
        path = raw[2:] if raw.startswith(("a/", "b/")) else raw
    else:
        parts = raw.split("/")
        if len(parts) <= strip:
            raise ImageBuildError(f"{where}: strip = {strip} leaves nothing of the path {raw!r}")
        path = "/".join(parts[strip:])
    parts = path.split("/")
    if ".." in parts:
        raise ImageBuildError(f"{where}: path {path!r} contains '..'")
    if not path or any(part in {"", "."} for part in parts):
        raise ImageBuildError(f"{where}: path {path!r} is not a plain relative path")
    return path


def _display(patched: PatchedFile, package: str, strip: int | None) -> str:
    target = patched.target_file
    raw = target if target and target != DEV_NULL else patched.source_file
    if strip is not None:
        parts = raw.split("/")
        return f"{package}/" + "/".join(parts[strip:]) if len(parts) > strip else raw
    return raw[2:] if raw.startswith(("a/", "b/")) else raw
