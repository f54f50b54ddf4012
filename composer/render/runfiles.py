"""Where `up`'s run files live (`state_dir`) and the environment `docker compose` runs them in.

A run file is a variant's compose file named by variant and config hash, so a rollback
restarts the previous container from exactly the file that created it (`files.run_file`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from composer.render.spec import API_KEY_VAR
from composer.stack.bounded import RUN_FILE_LIMIT, read_bounded

_INTERPOLATED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):[-?]")
COMPOSE_ENV_VARS = ("COMPOSE_FILE", "COMPOSE_PROJECT_NAME", "COMPOSE_PROFILES", "COMPOSE_ENV_FILES")


def state_dir() -> Path:
    """Where run files live: $XDG_STATE_HOME/vllm-composer (default ~/.local/state)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "vllm-composer"


def compose_environment(compose_file: Path, api_key: str | None) -> dict[str, str]:
    """The environment for `docker compose` on a run file: its own defaults win, the API key passed."""
    text = read_bounded(compose_file, "run file", RUN_FILE_LIMIT).decode("utf-8", errors="replace")
    names = set(_INTERPOLATED.findall(text))
    env = {k: v for k, v in os.environ.items() if k not in names and k not in COMPOSE_ENV_VARS}
    env.pop(API_KEY_VAR, None)
    if api_key:
        env[API_KEY_VAR] = api_key
    return env
