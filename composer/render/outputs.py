"""What `render` writes for a target, decided before anything is written: the committed folder
(compose/ or kubernetes/) from the stack files alone, or a local render with every value in a
folder of its own (`render_plan`); `stale_files` is what `render --check` reports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from composer.errors import UsageError
from composer.render.files import RenderedFile, is_current, render_all
from composer.render.live import render_live, resolve_live
from composer.stack.model import Stack


def committed_dir(stack: Stack, target: str) -> Path:
    """The committed folder of a target: compose/ or kubernetes/ next to the stack file."""
    if target == "kubernetes":
        from composer.render.kubernetes import kube_dir

        return kube_dir(stack)
    return stack.render_dir


def rendered_files(
    stack: Stack, target: str, variants: Sequence[str], out_dir: Path | None
) -> list[RenderedFile]:
    """The files of a target, rendered in memory into `out_dir` (default: the committed folder)."""
    folder = out_dir or committed_dir(stack, target)
    whole = stack.gateway.live and not variants  # the live set's files beside the variants' own
    if target == "kubernetes":
        from composer.render.kube_live import render_kube_live
        from composer.render.kubernetes import render_kubernetes

        files = render_kubernetes(stack, list(variants), folder)
        return files + (render_kube_live(stack, list(stack.gateway.live), folder) if whole else [])
    files = render_all(stack, list(variants), folder)
    return files + (render_live(resolve_live(stack, stack.gateway.live), folder) if whole else [])


@dataclass(frozen=True)
class RenderPlan:
    """The files to write, and whether local values differ from what the committed files hold."""

    files: list[RenderedFile]
    folder: Path
    local_values_left_out: bool = False
    refused: tuple[str, ...] = ()  # why vLLM refuses rendered variants with this stack (`Variant.refused`)


def render_plan(
    stack: Stack,
    stack_alone: Callable[[], Stack],
    target: str,
    variants: Sequence[str],
    out_dir: Path | None,
    *,
    has_flags: bool,
) -> RenderPlan:
    """The files `render` writes: into `out_dir` with every local value, else the committed ones."""
    committed = committed_dir(stack, target)
    if out_dir is not None and out_dir.resolve() != committed.resolve():
        return RenderPlan(
            rendered_files(stack, target, variants, out_dir), out_dir, refused=_refused(stack, variants)
        )
    if has_flags:
        raise UsageError(
            f"--set does not reach the committed {shown_path(committed)}/ files (they come from the "
            "stack files alone): render a local copy with --out DIR"
        )
    local = rendered_files(stack, target, variants, None)
    alone = stack_alone()
    files = rendered_files(alone, target, variants, None)
    differs = [f.content for f in local] != [f.content for f in files]
    return RenderPlan(files, committed, differs, _refused(alone, variants))


def _refused(stack: Stack, variants: Sequence[str]) -> tuple[str, ...]:
    return tuple(
        f"{name} is rendered but does not start with this stack: {stack.variants[name].refused}"
        for name in (variants or stack.variants)
        if name in stack.variants and stack.variants[name].refused
    )


def stale_files(files: Sequence[RenderedFile]) -> list[RenderedFile]:
    """The files whose bytes on disk differ from the rendered ones (or that are missing)."""
    return [f for f in files if not is_current(f)]


def shown_path(path: Path) -> Path:
    """A path relative to the working directory when it lies below it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path
