"""Read and validate a vendored diff before anything is built.

A diff is usable as an overlay when it parses as a unified diff, every path is a
relative path inside the package (no `..`, not absolute), it changes or adds only
Python files (.py, .pyi), and it has no binary patches, symlinks, renames or deletions.
Paths outside the package may be dropped with the recipe's `skip` globs (tests, docs);
compiled sources (C/C++/CUDA) are always refused: an overlay cannot compile them.
"""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass
from pathlib import PurePosixPath

from unidiff import PatchedFile, PatchSet
from unidiff.errors import UnidiffParseError

from composer.errors import ImageBuildError

DEV_NULL = "/dev/null"
PYTHON_SUFFIXES = frozenset({".py", ".pyi"})
COMPILED_SUFFIXES = frozenset(
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


def parse_diff(name: str, data: bytes, package: str, skip: tuple[str, ...] = ()) -> ParsedDiff:
    """Parse and validate a diff; raise ImageBuildError naming the diff and the offending path."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ImageBuildError(f"diff {name}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    try:
        patch_set = PatchSet(text)
    except UnidiffParseError as err:
        raise ImageBuildError(f"diff {name}: does not parse as a unified diff: {err}") from err
    if not patch_set:
        raise ImageBuildError(f"diff {name}: contains no file changes")
    changes: list[FileChange] = []
    skipped: list[str] = []
    for patched in patch_set:
        path = _check_file(name, patched, package, skip)
        if path is None:
            skipped.append(_display(patched))
        else:
            changes.append(FileChange(path, patched))
    if not changes:
        raise ImageBuildError(f"diff {name}: every file is skipped; nothing would change in {package}/")
    return ParsedDiff(name, sha256_hex(data), tuple(changes), tuple(skipped))


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


def _check_file(name: str, patched: PatchedFile, package: str, skip: tuple[str, ...]) -> str | None:
    """The validated path of one file change, or None when a skip glob drops it."""
    where = f"diff {name}: {_display(patched)}"
    sources = [p for p in (patched.source_file, patched.target_file) if p and p != DEV_NULL]
    paths = [_relative(where, p) for p in sources]
    if patched.is_binary_file:
        raise ImageBuildError(f"{where}: binary patches are not allowed in an overlay")
    if patched.is_symlink or SYMLINK_MODE in (patched.source_mode, patched.target_mode):
        raise ImageBuildError(f"{where}: symlinks (git mode 120000) are not allowed in an overlay")
    if GITLINK_MODE in (patched.source_mode, patched.target_mode):
        raise ImageBuildError(f"{where}: submodules are not allowed in an overlay")
    for path in paths:
        if PurePosixPath(path).suffix.lower() in COMPILED_SUFFIXES:
            raise ImageBuildError(
                f"{where}: C/C++/CUDA source; the overlay cannot compile, it only replaces Python files"
            )
    if any(fnmatch.fnmatchcase(path, glob) for path in paths for glob in skip):
        return None
    if len(set(paths)) > 1:
        raise ImageBuildError(f"{where}: renames are not supported; the overlay only adds or edits files")
    if patched.target_file == DEV_NULL:
        raise ImageBuildError(f"{where}: deletes a file; an overlay image cannot delete files")
    path = paths[0]
    parts = PurePosixPath(path).parts
    if len(parts) < 2 or parts[0] != package:
        raise ImageBuildError(
            f"{where}: outside the package {package}/; add it to the recipe's skip list if it is "
            "not needed at runtime"
        )
    if PurePosixPath(path).suffix not in PYTHON_SUFFIXES:
        raise ImageBuildError(f"{where}: only Python files (.py, .pyi) can be overlaid")
    if not patched:
        raise ImageBuildError(f"{where}: has no hunks (mode-only changes are not supported)")
    return path


def _relative(where: str, raw: str) -> str:
    """Strip git's a/ or b/ prefix and refuse absolute, escaping or odd paths."""
    if raw.startswith('"'):
        raise ImageBuildError(f"{where}: quoted path {raw} (unusual characters) is not allowed")
    if "\\" in raw or (len(raw) > 1 and raw[1] == ":"):
        raise ImageBuildError(f"{where}: path {raw!r} is not a relative POSIX path")
    path = raw[2:] if raw.startswith(("a/", "b/")) else raw
    if path.startswith("/"):
        raise ImageBuildError(f"{where}: absolute path {path!r} is not allowed")
    parts = path.split("/")
    if ".." in parts:
        raise ImageBuildError(f"{where}: path {path!r} contains '..'")
    if not path or any(part in {"", "."} for part in parts):
        raise ImageBuildError(f"{where}: path {path!r} is not a plain relative path")
    return path


def _display(patched: PatchedFile) -> str:
    target = patched.target_file
    raw = target if target and target != DEV_NULL else patched.source_file
    return raw[2:] if raw.startswith(("a/", "b/")) else raw
