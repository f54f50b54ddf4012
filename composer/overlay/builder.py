"""Offline overlay images. `build_overlay`: inputs present -> diffs valid (every problem in
one error) -> (re-)pinned and matching their pins -> a no-op when the image's labels record
the same inputs -> the touched files read from the base and patched in memory (a dry run
stops here) -> built `FROM base` + one COPY without network -> verified offline (the added
modules import, then the recipe's command) -> tagged. A failed verification removes the new
image; the old tag stays.
"""

from __future__ import annotations

import fnmatch
import posixpath
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from composer import __version__
from composer import labels as label_names
from composer.errors import ImageBuildError
from composer.overlay import steps as dock
from composer.overlay.diff import ParsedDiff, added_modules, check_pin, problems_error, read_diff
from composer.overlay.patch import applies_in_reverse, apply_diffs
from composer.overlay.recipe import DiffPin, Recipe, pin_recipe

Progress = Callable[[str], None]
IMPORT_PYTHON = "python3"
IMPORT_CHECK = (
    "import importlib, sys\n"
    "failed = []\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        importlib.import_module(name)\n"
    "    except BaseException as err:\n"
    "        failed.append(f'{name} ({type(err).__name__}: {err})')\n"
    "print('cannot import ' + '; '.join(failed) if failed else f'imported {len(sys.argv) - 1} module(s)')\n"
    "sys.exit(1 if failed else 0)\n"
)


@dataclass(frozen=True)
class BuildResult:
    """What `build_overlay` did: `built`, `current` (no-op) or `dry-run`."""

    status: str
    tag: str
    image_id: str = ""
    files: tuple[str, ...] = ()
    pinned: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)


def _quiet(_: str) -> None:
    """A progress callback that drops messages."""


def build_overlay(
    client: Any,
    recipe: Recipe,
    *,
    dry_run: bool = False,
    pin: bool = False,
    force: bool = False,
    progress: Progress = _quiet,
    extra_labels: Mapping[str, str] | None = None,
    verify: tuple[str, ...] | None = None,
    use_base: bool = False,
) -> BuildResult:
    """Validate, build and verify the recipe's overlay image (see the module docstring).
    `verify` replaces the recipe's command (the imports still run); a dry run writes nothing.
    A base that already contains the change (every diff applies in reverse) is refused,
    unless `use_base`: then the image is the base itself, labelled as such, and verified."""
    extra = dict(extra_labels or {})
    helper = {label_names.BUILD: recipe.name, **extra}
    recipe, base, diffs, pinned = prepare(client, recipe, pin, progress, dry_run=dry_run)
    skipped = recipe.skip_imports  # the added modules that need not import
    modules = tuple(m for m in added_modules(diffs) if not any(fnmatch.fnmatchcase(m, g) for g in skipped))
    checks = Verification(modules, verify or recipe.verify)
    labels = image_labels(recipe, base, diffs)
    current = dock.local_image(client, recipe.tag)
    same = current is not None and all((current.labels or {}).get(k) == v for k, v in labels.items())
    if same and not force and not dry_run:
        progress(f"{recipe.tag} is current ({current.short_id}); --force rebuilds")
        if verify:
            verify_image(client, current.id, checks, helper, progress, remove_on_failure=False)
        return BuildResult("current", recipe.tag, current.id, pinned=pinned, labels=labels)
    package_dir, originals = _base_files(client, base.id, recipe, diffs, helper, progress)
    if applies_in_reverse(originals, diffs):
        if not (use_base or dry_run):
            raise ImageBuildError(
                f"base image {recipe.base} already contains the change of "
                f"{', '.join(d.name for d in diffs)} (the diff applies in reverse): no overlay is "
                f"needed; `compose-spec build {recipe.name} --use-base` makes {recipe.tag} the base "
                "itself, labelled as such"
            )
        patched = {}
        labels[label_names.OVERLAY_FROM_BASE] = "contains-change"
        would = "would be" if dry_run and not use_base else "will be"
        progress(f"{recipe.base} already contains the change: with --use-base {recipe.tag} {would} the base")
    else:
        patched = apply_diffs(originals, diffs)
        progress(f"dry run: {len(diffs)} diff(s) apply cleanly to {len(patched)} file(s)")
    if dry_run:
        progress(f"dry run: verification would {checks.describe()}")
        return BuildResult("dry-run", recipe.tag, files=tuple(patched), pinned=pinned, labels=labels)
    labels[label_names.OVERLAY_PACKAGE_DIR] = package_dir
    parent = posixpath.dirname(package_dir.rstrip("/"))
    image_id = dock.build_image(
        client, base.id, parent, patched, {**labels, **extra}, progress, no_cache=force
    )
    verify_image(client, image_id, checks, helper, progress)
    dock.tag_image(client, image_id, recipe.tag)
    progress(f"tagged {recipe.tag} ({image_id[:19]})")
    replaced = current is not None and current.id != image_id and label_names.OVERLAY_RECIPE in current.labels
    if replaced and dock.drop_if_untagged(client, current.id):
        progress(f"removed the replaced image {current.short_id}")
    return BuildResult("built", recipe.tag, image_id, tuple(patched), pinned, labels)


def base_contains_change(client: Any, recipe: Recipe) -> bool:
    """True when the recipe's local base already holds every diff (they apply in reverse);
    ImageBuildError when an input (a diff file, the base image) is missing."""
    base = check_inputs(client, recipe)
    diffs = validate_diffs(recipe)
    _, files = _base_files(client, base.id, recipe, diffs, {label_names.BUILD: recipe.name})
    return applies_in_reverse(files, diffs)


def _base_files(
    client: Any,
    base_id: str,
    recipe: Recipe,
    diffs: list[ParsedDiff],
    helper: Mapping[str, str],
    progress: Progress = _quiet,
) -> tuple[str, dict[str, str | None]]:
    """The package folder in the base, and the text of every file the diffs touch there."""
    progress(f"locating package {recipe.package} in {recipe.base} (offline)")
    code, output = dock.run_offline(client, base_id, recipe.locate, helper)  # the recipe's locate command
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if code != 0 or not lines or not lines[-1].startswith("/"):
        said = lines[-1] if lines else "no output"
        raise ImageBuildError(
            f"cannot locate package {recipe.package} in {recipe.base} (exit {code}): {said}"
        )
    package_dir = lines[-1]
    paths = sorted({c.path for d in diffs for c in d.changes})
    progress(f"reading {len(paths)} file(s) from {package_dir}")
    parent = posixpath.dirname(package_dir.rstrip("/"))
    return package_dir, dock.read_files(client, base_id, parent, paths, helper)


def readable(argv: tuple[str, ...] | list[str]) -> str:
    """An argv as one shell line a person reads and can paste: an argument with single quotes
    in it is double-quoted when that needs no escapes (never `'"'"'`)."""
    words = []
    for arg in argv:
        quoted = shlex.quote(arg)
        if quoted != arg and "'" in arg and not any(c in arg for c in '"$`\\!'):
            quoted = f'"{arg}"'
        words.append(quoted)
    return " ".join(words)


@dataclass(frozen=True)
class Verification:
    """What proves a built image right: modules the diffs add must import, then a command."""

    modules: tuple[str, ...]
    command: tuple[str, ...]

    def steps(self) -> list[tuple[str, ...]]:
        """The argvs to run, in order."""
        imports = [(IMPORT_PYTHON, "-c", IMPORT_CHECK, *self.modules)] if self.modules else []
        return [*imports, self.command]

    def describe(self) -> str:
        """In words, for progress lines."""
        imports = (
            f"import {len(self.modules)} added module(s) ({', '.join(self.modules)}), then "
            if self.modules
            else ""
        )
        return f"{imports}run {readable(self.command)}"


def prepare(
    client: Any, recipe: Recipe, pin: bool, progress: Progress, dry_run: bool = False
) -> tuple[Recipe, Any, list[ParsedDiff], tuple[str, ...]]:
    """Inputs present, diffs valid, (re-)pinned and matching their pins, base id as pinned;
    with `dry_run`, a pin is only reported (image.toml is never written)."""
    base = check_inputs(client, recipe)
    diffs = validate_diffs(recipe)
    for diff in diffs:
        for path in diff.skipped:
            progress(f"{diff.name}: skipping {path} (matches the recipe's skip list)")
    pinned: tuple[str, ...] = ()
    if pin and dry_run:
        for pin_of, diff in zip(recipe.diffs, diffs, strict=True):
            if pin_of.sha256 != diff.sha256:
                progress(f"dry run: would pin {diff.name} to sha256 {diff.sha256}; {recipe.path} unchanged")
    elif pin:
        pinned = tuple(pin_recipe(recipe, {d.name: d.sha256 for d in diffs}))
        for name in pinned:
            progress(f"pinned {name} in {recipe.path}")
    if pin:
        pins = tuple(replace(p, sha256=d.sha256) for p, d in zip(recipe.diffs, diffs, strict=True))
        recipe = replace(recipe, diffs=pins)
    for pin_of, diff in zip(recipe.diffs, diffs, strict=True):
        check_pin(diff, pin_of.sha256, f"run `compose-spec build {recipe.name} --pin`")
    if recipe.base_id and recipe.base_id not in {base.id, *base.attrs.get("RepoDigests", [])}:
        raise ImageBuildError(f"base image {recipe.base} is {base.id}, the recipe pins {recipe.base_id}")
    return recipe, base, diffs, pinned


def check_inputs(client: Any, recipe: Recipe) -> Any:
    """The local base image; one error line listing every missing input (diffs, base)."""
    missing = [_missing_diff(recipe, d) for d in recipe.diffs if not d.file.is_file()]
    base = dock.local_image(client, recipe.base)
    if base is None:
        missing.append(
            f"load the base image {recipe.base} into the local Docker engine "
            "(e.g. `docker load -i FILE.tar`; builds never pull)"
        )
    if missing:
        raise ImageBuildError(f"cannot build {recipe.name}: " + "; ".join(missing))
    return base


def validate_diffs(recipe: Recipe) -> list[ParsedDiff]:
    """Parse and check every diff of the recipe (no Docker); one error lists every problem."""
    diffs: list[ParsedDiff] = []
    problems: list[str] = []
    for pin in recipe.diffs:
        diff, found = read_diff(pin.name, pin.file.read_bytes(), recipe.package, pin.skip, pin.strip)
        problems += found
        if diff is not None:
            diffs.append(diff)
    if problems:
        raise problems_error(problems, f"in the diffs of recipe {recipe.name}")
    return diffs


def verify_image(
    client: Any,
    image_id: str,
    checks: Verification,
    labels: Mapping[str, str],
    progress: Progress,
    remove_on_failure: bool = True,
) -> None:
    """Run the verification offline in the image; remove a new image when it fails."""
    progress(f"verifying (offline): {checks.describe()}")
    for argv in checks.steps():
        try:
            code, output = dock.run_offline(client, image_id, argv, labels)
            if code != 0:
                last = [line for line in output.splitlines() if line.strip()][-1:] or ["no output"]
                what = "the image is kept" if not remove_on_failure else "image removed"
                step = "importing the added modules" if argv[2:3] == (IMPORT_CHECK,) else readable(argv)
                step = step if len(step) <= 80 else step[:77] + "..."
                raise ImageBuildError(
                    f"verification failed in {'the image' if not remove_on_failure else 'the new image'} "
                    f"(exit {code} from {step}), {what}: {last[0].strip()}"
                )
        except BaseException:
            if remove_on_failure:
                dock.remove_image(client, image_id)
            raise
    progress("verification passed")


def image_labels(recipe: Recipe, base: Any, diffs: Sequence[ParsedDiff | DiffPin]) -> dict[str, str]:
    """The labels that record every input of the image (each diff by its name and sha256)."""
    digests = base.attrs.get("RepoDigests") or []
    return {
        label_names.OVERLAY_RECIPE: recipe.name,
        f"{label_names.OVERLAY_PREFIX}.recipe-hash": recipe.fingerprint(),
        f"{label_names.OVERLAY_PREFIX}.base": recipe.base,
        f"{label_names.OVERLAY_PREFIX}.base-id": base.id,
        f"{label_names.OVERLAY_PREFIX}.base-digest": digests[0] if digests else "",
        f"{label_names.OVERLAY_PREFIX}.diffs": ",".join(
            f"{Path(d.name).name}=sha256:{d.sha256}" for d in diffs
        ),
        f"{label_names.OVERLAY_PREFIX}.version": __version__,
    }


def _missing_diff(recipe: Recipe, pin: DiffPin) -> str:
    try:
        where = str(pin.file.relative_to(Path.cwd()))
    except ValueError:
        where = str(pin.file)
    step = f"download {pin.source} on a connected machine and " if pin.source else ""
    return f"{step}put it at {where}, then run `compose-spec build {recipe.name} --pin`"
