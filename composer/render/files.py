"""Render compose files and shell launchers from templates/ with one Jinja environment.

Files are rendered in memory first; `write_all` writes the set all or nothing and leaves
unchanged files alone. `run_file` is the swap's one entry point into rendering. Quoting: in
compose files every literal is a YAML double-quoted scalar with `$` as `$$`, a host value
`${VAR:-default}` (a default holding `}` or a newline is a RenderError); launchers use bash
double-quoted words with `${VAR}`, so nothing is split, globbed or expanded.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import jinja2

from composer.errors import RenderError, cannot_write
from composer.render.runfiles import state_dir
from composer.render.spec import LOG_DRIVER, Text, Var
from composer.render.target import Target, resolve_target
from composer.stack.bounded import FileTooLarge, read_bounded, replace_file, temp_beside
from composer.stack.model import Stack
from composer.stack.starter import shipped_dir


def templates_dir() -> Path:
    """The Jinja templates: `composer/templates` in a wheel, else the checkout's `templates/`."""
    return shipped_dir("templates", "templates")


OUTPUTS = (("compose.yml.j2", "{variant}.yml", 0o644), ("launcher.sh.j2", "{variant}.sh", 0o755))
KEEP_RUN_FILES = 3  # run files kept per variant, besides those containers were created from


@dataclass(frozen=True)
class RenderedFile:
    """One output: where it goes, its text and its file mode."""

    path: Path
    content: str
    mode: int


_SAFE_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
UNHOLDABLE_IN_DEFAULT = {"}": "'}'", "\n": "a newline"}  # what a compose `${VAR:-default}` cannot hold


def _compose_literal(value: str) -> str:
    return value.replace("$", "$$")


def compose_text(value: Text) -> str:
    """A Text as a compose string: literals `$`-escaped, variables as `${VAR:-default}`."""
    out = []
    for part in value:
        if isinstance(part, Var):
            for char, what in UNHOLDABLE_IN_DEFAULT.items():
                if char in part.default:
                    raise RenderError(
                        f"{part.name} default {part.default!r} contains {what}, which a compose "
                        f"${{VAR:-default}} cannot hold: choose a value without it"
                    )
            out.append(f"${{{part.name}:-{_compose_literal(part.default)}}}")
        else:
            out.append(_compose_literal(part))
    return "".join(out)


def _yaml_char(char: str) -> str:
    code = ord(char)
    if char in '"\\':
        return "\\" + char
    if 0x20 <= code < 0x7F:
        return char
    if 0xD800 <= code <= 0xDFFF:
        raise RenderError(f"cannot render {char!r}: a lone surrogate is not text")
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def yaml_quote(value: str) -> str:
    """An ASCII YAML double-quoted scalar (escapes, never surrogate pairs, which Go's YAML rejects)."""
    return '"' + "".join(_yaml_char(c) for c in value) + '"'


def compose_quote(value: Text | str) -> str:
    return yaml_quote(compose_text((value,) if isinstance(value, str) else value))


def _shell_char(char: str) -> str:
    if char in '\\"$`':
        return "\\" + char
    if char < " " or char == "\x7f":
        # Outside the double quotes: bash 5.2 corrupts \x01 and \x7f inside them in arrays.
        return f"\"$'\\{ord(char):03o}'\""
    return char


def shell_inner(value: Text | str) -> str:
    """A Text as the inside of a bash double-quoted word: literals escaped, `${VAR}`s."""
    parts = (value,) if isinstance(value, str) else value
    out = []
    for part in parts:
        if isinstance(part, Var):
            out.append(f"${{{part.name}}}")
        else:
            out.append("".join(_shell_char(c) for c in part))
    return "".join(out)


def shell_double_quoted(value: Text | str) -> str:
    return '"' + shell_inner(value) + '"'


def shell_word(value: str) -> str:
    """A literal as one bash word: bare when plainly safe, else double-quoted."""
    if _SAFE_WORD.fullmatch(value):
        return value
    return shell_double_quoted(value)


def one_line(value: str) -> str:
    """Text safe for a `#` comment: control characters folded to spaces."""
    return "".join(c if c.isprintable() else " " for c in value)


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    try:
        return jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError):
        return None


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        bytecode_cache=_bytecode_cache(),
    )
    env.filters.update(
        cq=compose_quote,
        yq=yaml_quote,
        shd=shell_double_quoted,
        shi=shell_inner,
        shw=shell_word,
        comment=one_line,
    )
    return env


def render_template(template: str, what: str, **context: object) -> str:
    """A template rendered with the one environment (RenderError naming `what` on its error)."""
    try:
        return _environment().get_template(template).render(context, log_driver=LOG_DRIVER)
    except jinja2.TemplateError as err:
        raise RenderError(f"template error while rendering {what}: {err}") from err


def render_variant(target: Target, out_dir: Path) -> list[RenderedFile]:
    """The compose file and the launcher of one variant, in memory."""
    context = {**vars(target), "health_cmd": shlex.join(target.spec.healthcheck.test[1:])}
    return [
        RenderedFile(
            out_dir / name.format(variant=target.name),
            render_template(template, target.name, **context),
            mode,
        )
        for template, name, mode in OUTPUTS
    ]


def render_all(stack: Stack, variants: list[str], out_dir: Path) -> list[RenderedFile]:
    """Render every requested variant (all when empty) before anything is written."""
    names = variants or list(stack.variants)
    files: list[RenderedFile] = []
    for name in names:
        files += render_variant(resolve_target(stack, name), out_dir)
    return files


def run_file(
    target: Target, directory: Path | None = None, keep: Iterable[str | Path | None] | None = None
) -> Path:
    """Write (if needed) the compose file `up` starts, named by variant and hash in the state folder;
    with `keep`, prune older run files but the newest few and those in `keep`."""
    folder = directory or state_dir()
    out = folder / target.spec.project
    compose_file = next(f for f in render_variant(target, out) if f.path.suffix == ".yml")
    written = RenderedFile(out / f"{target.name}-{target.hash}.yml", compose_file.content, 0o644)
    write_atomic(written)
    os.utime(written.path)  # used now: the newest, whether rewritten or not
    if keep is not None:
        prune_run_files(target.spec.project, target.name, (written.path, *keep), directory=folder)
    return written.path


def prune_run_files(
    project: str,
    variant: str,
    keep: Iterable[str | Path | None] = (),
    directory: Path | None = None,
) -> list[Path]:
    """Remove a variant's run files but the KEEP_RUN_FILES newest and those in `keep`; the removed."""
    folder = (directory or state_dir()) / project
    own = re.compile(re.escape(variant) + r"-[0-9a-f]{16}\.yml")
    try:
        names = [p for p in folder.iterdir() if own.fullmatch(p.name)]
    except OSError:  # no folder yet: nothing to prune
        return []
    aged: list[tuple[int, Path]] = []
    for path in names:
        with contextlib.suppress(OSError):  # gone meanwhile
            aged.append((path.lstat().st_mtime_ns, path))
    aged.sort(reverse=True)
    protected = {Path(k).resolve() for k in keep if k}
    removed = []
    for _, path in aged[KEEP_RUN_FILES:]:
        if path.resolve() in protected:
            continue
        with contextlib.suppress(OSError):  # pruning never fails a swap
            path.unlink()
            removed.append(path)
    return removed


def is_current(file: RenderedFile) -> bool:
    """True when the file on disk already has exactly these bytes."""
    expected = file.content.encode()
    try:
        return read_bounded(file.path, "rendered file", len(expected)) == expected
    except (OSError, FileTooLarge):  # absent, a directory, unreadable, longer: not current
        return False


@dataclass
class _Staged:
    """A changed file written to a temp file beside its target, and the bytes and mode it replaces."""

    file: RenderedFile
    tmp: Path
    old: bytes | None = None
    old_mode: int | None = None
    placed: bool = False


def _temp_beside(path: Path, data: bytes, mode: int) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return temp_beside(path, data, mode)
    except OSError as err:
        raise RenderError(cannot_write(path, err)) from err


def _stage(file: RenderedFile) -> _Staged:
    path, old, old_mode = file.path, None, None
    if path.is_symlink() or path.exists():
        if path.is_dir():
            raise RenderError(f"cannot write {path}: a directory is in its place (remove it or use --out)")
        try:
            old, old_mode = path.read_bytes(), path.stat().st_mode & 0o777
        except OSError as err:
            raise RenderError(f"cannot write {path}: {err.strerror or err}") from err
    return _Staged(file, _temp_beside(path, file.content.encode(), file.mode), old, old_mode)


def _put_back(staged: _Staged) -> None:
    """Undo one rename: the old bytes and mode again, or no file when there was none."""
    path = staged.file.path
    if staged.old is None:
        path.unlink(missing_ok=True)
        return
    tmp = _temp_beside(path, staged.old, staged.old_mode or 0o644)
    try:
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_all(files: list[RenderedFile]) -> list[bool]:
    """Write every file, all or nothing (RenderError names the one that failed); per file,
    whether it was (re)written."""
    changed = [not is_current(f) for f in files]
    staged: list[_Staged] = []
    try:
        for file, differs in zip(files, changed, strict=True):
            if differs:
                staged.append(_stage(file))
        for item in staged:
            try:
                os.replace(item.tmp, item.file.path)
            except OSError as err:
                raise RenderError(
                    f"cannot write {item.file.path}: {err.strerror or err}; no file was changed"
                ) from err
            item.placed = True
    except BaseException:
        for item in reversed(staged):
            if item.placed:
                _put_back(item)
            else:
                item.tmp.unlink(missing_ok=True)
        raise
    for file, differs in zip(files, changed, strict=True):
        try:
            if not differs and file.path.stat().st_mode & 0o777 != file.mode:
                os.chmod(file.path, file.mode)
        except OSError as err:
            raise RenderError(f"cannot set the mode of {file.path}: {err.strerror or err}") from err
    return changed


def write_atomic(file: RenderedFile) -> bool:
    """Write unless unchanged; True when the file was (re)written."""
    if is_current(file):
        if file.path.stat().st_mode & 0o777 != file.mode:
            os.chmod(file.path, file.mode)
        return False
    try:
        file.path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(file.path, file.content.encode(), file.mode)
    except OSError as err:
        raise RenderError(cannot_write(file.path, err)) from err
    return True
