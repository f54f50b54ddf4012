"""Self-contained compose files for `up`: every host value resolved into its default.

Each file is named by variant and config hash and kept in a state directory, so a
rollback restarts the previous container from exactly the file that created it. Only
the newest few per variant are kept, and never one a container was created from.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

from composer.render.files import RenderedFile, render_variant, write_atomic
from composer.render.spec import API_KEY_VAR
from composer.render.target import Target

_INTERPOLATED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):[-?]")
KEEP_RUN_FILES = 3  # run files kept per variant, besides those containers were created from
COMPOSE_ENV_VARS = ("COMPOSE_FILE", "COMPOSE_PROJECT_NAME", "COMPOSE_PROFILES", "COMPOSE_ENV_FILES")


def state_dir() -> Path:
    """Where run files live: $XDG_STATE_HOME/vllm-composer (default ~/.local/state)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "vllm-composer"


def run_file(target: Target, directory: Path | None = None) -> Path:
    """Write (if needed) and return the compose file that `up` starts for a variant."""
    out = (directory or state_dir()) / target.spec.project
    compose_file = next(f for f in render_variant(target, out) if f.path.suffix == ".yml")
    written = RenderedFile(out / f"{target.name}-{target.hash}.yml", compose_file.content, 0o644)
    write_atomic(written)
    os.utime(written.path)  # used now: the newest, whether rewritten or not
    return written.path


def prune_run_files(
    project: str,
    variant: str,
    keep: Iterable[str | Path | None] = (),
    newest: int = KEEP_RUN_FILES,
    directory: Path | None = None,
) -> list[Path]:
    """Remove a variant's run files but the `newest` ones and those in `keep`; return the removed.

    `keep` names the files that containers were created from (the running one, the
    rollback target): they are never removed, however old.
    """
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
    for _, path in aged[newest:]:
        if path.resolve() in protected:
            continue
        with contextlib.suppress(OSError):  # pruning never fails a swap
            path.unlink()
            removed.append(path)
    return removed


def compose_environment(compose_file: Path, api_key: str | None) -> dict[str, str]:
    """The environment for `docker compose` on a run file: the file's own defaults win.

    Host variables the file interpolates are removed, so the values resolved when it was
    rendered apply; only the API key is passed in.
    """
    names = set(_INTERPOLATED.findall(compose_file.read_text(encoding="utf-8")))
    env = {k: v for k, v in os.environ.items() if k not in names and k not in COMPOSE_ENV_VARS}
    env.pop(API_KEY_VAR, None)
    if api_key:
        env[API_KEY_VAR] = api_key
    return env
