"""Self-contained compose files for `up`: every host value resolved into its default.

Each file is named by variant and config hash and kept in a state directory, so a
rollback restarts the previous container from exactly the file that created it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from composer.render.files import RenderedFile, render_variant, write_atomic
from composer.render.spec import API_KEY_VAR, Target

_INTERPOLATED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):[-?]")
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
    return written.path


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
