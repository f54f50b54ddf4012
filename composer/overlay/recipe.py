"""Overlay recipes: `images/<name>/image.toml`, resolved against the stack's images.

A recipe names a base image, the package to patch, how to find the package inside the
image, the vendored diffs (in order, each pinned by sha256), the output tag and a
verification command. `base` and `tag` may be `@images.<key>` references to the stack.
A `[[for_base]]` table whose `match` glob matches the resolved base replaces the diffs
(and optionally the verify command) for that base (the demo's simulator base needs its own
diff). A diff's `strip = N` is read by composer.overlay.diff. Two recipes that write the
same output tag are refused.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shlex
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from composer.errors import ImageBuildError, UsageError, did_you_mean

RECIPE_FILE = "image.toml"
IMAGE_REF_PREFIX = "@images."
DEFAULT_LOCATE = (
    "python3",
    "-c",
    "import importlib.util as u; print(u.find_spec('{package}').submodule_search_locations[0])",
)
TOP_KEYS = {"description", "base", "package", "output", "verify", "diffs", "for_base"}
DIFF_KEYS = {"file", "sha256", "source", "skip", "strip"}
FOR_BASE_KEYS = {"match", "diffs", "verify", "base_id"}
TABLE_KEYS = {
    "base": {"image", "id"},
    "package": {"name", "locate"},
    "output": {"tag"},
    "verify": {"command", "skip_imports"},
}


@dataclass(frozen=True)
class DiffPin:
    """One vendored diff: where it is, its pinned sha256 and paths it may skip."""

    name: str
    file: Path
    sha256: str
    source: str = ""
    skip: tuple[str, ...] = ()
    strip: int | None = None


@dataclass(frozen=True)
class Recipe:
    """A recipe resolved against the stack: concrete image references and diff list."""

    name: str
    path: Path
    base: str
    tag: str
    package: str
    locate: tuple[str, ...]
    verify: tuple[str, ...]
    diffs: tuple[DiffPin, ...]
    base_id: str | None = None
    for_base: int | None = None
    skip_imports: tuple[str, ...] = ()

    def fingerprint(self) -> str:
        """A hash of every input that shapes the image, except the base image itself."""
        data: dict[str, object] = {
            "package": self.package,
            "locate": self.locate,
            "verify": self.verify,
            "diffs": [(d.name, d.sha256, d.skip) for d in self.diffs],
        }
        if any(d.strip is not None for d in self.diffs):  # only when used: older images stay current
            data["strip"] = [d.strip for d in self.diffs]
        if self.skip_imports:
            data["skip_imports"] = self.skip_imports
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def recipe_names(recipes_dir: Path) -> list[str]:
    """The recipes found under `recipes_dir` (folders with an image.toml)."""
    if not recipes_dir.is_dir():
        return []
    return sorted(p.parent.name for p in recipes_dir.glob(f"*/{RECIPE_FILE}"))


def load_recipe(recipes_dir: Path, name: str, images: Mapping[str, str]) -> Recipe:
    """Read `recipes_dir/name/image.toml` and resolve it against the stack's images."""
    path = recipes_dir / name / RECIPE_FILE
    if "/" in name or name in {"", ".", ".."} or not path.is_file():
        names = recipe_names(recipes_dir)
        if not names:
            raise UsageError(
                f"no image recipes in {recipes_dir}/ (a recipe is {recipes_dir}/NAME/{RECIPE_FILE}): "
                "run build from the folder that holds them, e.g. the project's checkout"
            )
        hint = did_you_mean(name, names)
        raise UsageError(
            f"unknown image recipe {name!r} in {recipes_dir}/:{hint} choose one of {', '.join(names)}"
        )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"{path}: not valid TOML: {err}") from err
    _reject_unknown(data, TOP_KEYS, path, "")
    for table, allowed in TABLE_KEYS.items():
        if not isinstance(data.get(table, {}), dict):
            raise UsageError(f"{path}: [{table}] must be a table")
        _reject_unknown(data.get(table, {}), allowed, path, f"{table}.")
    base = _resolve_ref(_text(data, "base", "image", path), images, path, "base.image")
    tag = _resolve_ref(_text(data, "output", "tag", path), images, path, "output.tag")
    if tag == base:
        raise UsageError(f"{path}: output.tag and base.image are both {tag!r}: the overlay needs its own tag")
    same = [n for n in recipes_writing(recipes_dir, tag, images) if n != name]
    if same:
        raise UsageError(
            f"recipes {name} and {same[0]} both write the image {tag}: give each its own output.tag "
            f"({path} and {recipes_dir / same[0] / RECIPE_FILE})"
        )
    package = _text(data, "package", "name", path)
    locate = _argv(data.get("package", {}).get("locate"), path, "package.locate")
    locate = locate or tuple(part.replace("{package}", package) for part in DEFAULT_LOCATE)
    verify = _argv(data.get("verify", {}).get("command"), path, "verify.command")
    if not verify:
        raise UsageError(f"{path}: verify.command is required (an argv list run in the built image)")
    skip_imports = data.get("verify", {}).get("skip_imports", [])
    if not isinstance(skip_imports, list) or not all(isinstance(s, str) and s for s in skip_imports):
        raise UsageError(f"{path}: verify.skip_imports must be a list of module globs, got {skip_imports!r}")
    diffs_raw, base_id, index = data.get("diffs", []), data.get("base", {}).get("id"), None
    for i, alt in enumerate(data.get("for_base", [])):
        _reject_unknown(alt, FOR_BASE_KEYS, path, "for_base.")
        if fnmatch.fnmatchcase(base, str(alt.get("match", ""))):
            diffs_raw, index = alt.get("diffs", []), i
            verify = _argv(alt.get("verify"), path, f"for_base[{i}].verify") or verify
            base_id = alt.get("base_id", base_id)
            break
    diffs = tuple(_diff(raw, path) for raw in diffs_raw)
    if not diffs:
        raise UsageError(f"{path}: no diffs listed for base {base!r}")
    return Recipe(name, path, base, tag, package, locate, verify, diffs, base_id, index, tuple(skip_imports))


def verify_argv(command: str) -> tuple[str, ...]:
    """A `--verify` command line split like a shell would (no shell runs it)."""
    try:
        argv = tuple(shlex.split(command))
    except ValueError as err:
        raise UsageError(f"--verify {command!r}: {err}; quote it like a shell command line") from err
    if not argv:
        raise UsageError("--verify needs a command, e.g. --verify \"python3 -c 'import vllm'\"")
    return argv


def recipes_writing(recipes_dir: Path, tag: str, images: Mapping[str, str]) -> list[str]:
    """The recipes under `recipes_dir` whose output tag resolves to `tag` (unreadable ones skipped)."""
    return [n for n in recipe_names(recipes_dir) if _output_tag(recipes_dir / n / RECIPE_FILE, images) == tag]


def _output_tag(path: Path, images: Mapping[str, str]) -> str | None:
    """A recipe's resolved output tag, or None when the file cannot tell."""
    try:
        value = tomllib.loads(path.read_text(encoding="utf-8")).get("output", {}).get("tag")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, AttributeError):
        return None
    if not isinstance(value, str) or not value:
        return None
    return images.get(value.removeprefix(IMAGE_REF_PREFIX)) if value.startswith(IMAGE_REF_PREFIX) else value


def pin_recipe(recipe: Recipe, digests: Mapping[str, str]) -> list[str]:
    """Rewrite the recipe's sha256 pins in image.toml atomically, keeping its comments and
    layout (`digests`: diff name -> new sha256); the names whose pin changed."""
    changed = [d.name for d in recipe.diffs if digests[d.name] != d.sha256]
    if not changed:
        return []
    text = recipe.path.read_text(encoding="utf-8")
    header = "[[diffs]]" if recipe.for_base is None else "[[for_base.diffs]]"
    lines = text.splitlines(keepends=True)
    tables = _diff_tables(lines, header, recipe.for_base)
    if len(tables) != len(recipe.diffs):
        raise ImageBuildError(f"{recipe.path}: cannot locate the diff tables to pin; edit sha256 by hand")
    for (start, end), pin in zip(tables, recipe.diffs, strict=True):
        _set_sha(lines, start, end, digests[pin.name])
    new_text = "".join(lines)
    check = tomllib.loads(new_text)
    listed = check["diffs"] if recipe.for_base is None else check["for_base"][recipe.for_base]["diffs"]
    if [d.get("sha256") for d in listed] != [digests[p.name] for p in recipe.diffs]:
        raise ImageBuildError(f"{recipe.path}: pinning would not round-trip; edit sha256 by hand")
    write_atomic(recipe.path, new_text)
    return changed


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` via a temporary file in the same folder."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _diff_tables(lines: list[str], header: str, for_base: int | None) -> list[tuple[int, int]]:
    """(start, end) line ranges of the diff tables under `header` (in for_base #n)."""
    tables: list[tuple[int, int]] = []
    start: int | None = None
    alt = -1
    for i, line in enumerate([*lines, "[end]"]):
        stripped = line.strip()
        if not stripped.startswith("["):
            continue
        if start is not None:
            tables.append((start, i))
        start = None
        alt += stripped == "[[for_base]]"
        if stripped == header and (for_base is None or alt == for_base):
            start = i
    return tables


def _set_sha(lines: list[str], start: int, end: int, digest: str) -> None:
    keys = [line.split("=", 1)[0].strip() for line in lines[start + 1 : end]]
    if "sha256" in keys:
        lines[start + 1 + keys.index("sha256")] = f'sha256 = "{digest}"\n'
    elif "file" in keys:
        lines.insert(start + 2 + keys.index("file"), f'sha256 = "{digest}"\n')
    else:
        raise ImageBuildError("a diff table has no `file` key; edit sha256 by hand")


def _diff(raw: object, path: Path) -> DiffPin:
    if not isinstance(raw, dict) or not isinstance(raw.get("file"), str) or not raw["file"]:
        raise UsageError(f'{path}: every diff needs file = "NAME.diff", got {raw!r}')
    _reject_unknown(raw, DIFF_KEYS, path, "diffs.")
    name = raw["file"]
    if os.path.isabs(name):
        raise UsageError(f"{path}: diff file {name!r} must be relative to the recipe folder")
    skip = raw.get("skip", [])
    if not isinstance(skip, list) or not all(isinstance(s, str) for s in skip):
        raise UsageError(f"{path}: diffs.skip must be a list of path globs, got {skip!r}")
    strip = raw.get("strip")
    if strip is not None and (isinstance(strip, bool) or not isinstance(strip, int) or not 0 <= strip <= 32):
        raise UsageError(
            f"{path}: diffs.strip must be a whole number of leading path components (0 to 32, like "
            f"`patch -p1`), got {strip!r}"
        )
    sha = str(raw.get("sha256", "")).lower()
    source = str(raw.get("source", ""))
    return DiffPin(name, (path.parent / name).resolve(), sha, source, tuple(skip), strip)


def _resolve_ref(value: str, images: Mapping[str, str], path: Path, key: str) -> str:
    if not value.startswith(IMAGE_REF_PREFIX):
        return value
    image_key = value[len(IMAGE_REF_PREFIX) :]
    if image_key not in images:
        known = ", ".join(f"{IMAGE_REF_PREFIX}{k}" for k in sorted(images))
        raise UsageError(f"{path}: {key} = {value!r} is not a stack image: use one of {known}")
    return images[image_key]


def _text(data: Mapping, table: str, key: str, path: Path) -> str:
    value = data.get(table, {}).get(key) if isinstance(data.get(table), dict) else None
    if not isinstance(value, str) or not value:
        raise UsageError(f"{path}: {table}.{key} is required (a non-empty string)")
    return value


def _argv(value: object, path: Path, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{path}: {key} must be a non-empty list of strings (an argv), got {value!r}")
    return tuple(value)


def _reject_unknown(table: Mapping, allowed: set[str], path: Path, prefix: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise UsageError(
            f"{path}: unknown key {prefix}{unknown[0]}: allowed are " + ", ".join(sorted(allowed))
        )
