"""`compose-spec init`: a starter stack (the project's own `composer.toml` and `.env.example`,
shipped as `composer/starter/`) in any folder; a `.env` it writes holds a generated key (0600).
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

from composer.errors import UsageError
from composer.stack.bounded import replace_file
from composer.stack.load import compose_project_name
from composer.stack.new_stack import reference_stack_text, schema_path, with_identity

STARTER_FILES = ("composer.toml", ".env.example")
ENV_MODE = 0o600
FIRST_PORT = 8000


@dataclass(frozen=True)
class Written:
    """One file `init` wrote."""

    path: Path


def shipped_dir(installed_name: str, checkout_name: str = "") -> Path:
    """A folder shipped as `composer/<installed_name>`, else the checkout's `checkout_name`."""
    package = Path(__file__).resolve().parent.parent
    installed = package / installed_name
    return installed if installed.is_dir() else package.parent / checkout_name


def generated_key() -> str:
    """A fresh API key: 48 hex digits behind `sk-`."""
    return "sk-" + secrets.token_hex(24)


def free_port(first: int = FIRST_PORT) -> int:
    """The first of 200 ports from `first` on that nothing listens on here (a stack's default port)."""
    for port in range(first, min(first + 200, 65536)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise UsageError(f"no free port in {first}-{first + 199}: pass --port N")


def folder_project(directory: Path) -> str:
    """The project name `init` proposes: the folder's name as docker compose sanitises it."""
    name = compose_project_name(directory.resolve().name)
    if not name:
        raise UsageError(
            f"the folder name {directory.resolve().name!r} gives no compose project name: pass --project NAME"
        )
    return name


def schema_file() -> Path:
    """The JSON Schema of composer.toml: `composer/schema` in a wheel, else the checkout's schema/."""
    return shipped_dir("schema", "schema") / "composer.schema.json"


def init_stack(
    directory: Path,
    *,
    with_env: bool = False,
    force: bool = False,
    stack_text: str | None = None,
    identity: tuple[str, int] | None = None,
) -> list[Written]:
    """Write the starter files (and a `.env` with a generated key) into `directory`: composer.toml is
    `stack_text`, else the reference stack (with `identity`: project, port). UsageError before
    writing anything when a file exists without `force`; `.env` is never overwritten."""
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} is not a folder: give a folder for the starter files")
    targets = [directory / name for name in STARTER_FILES]
    existing = [p for p in targets if p.exists() or p.is_symlink()]
    if existing and not force:
        raise UsageError(f"{existing[0]} exists already: pass --force to overwrite the starter files")
    env_path = directory / ".env"
    if with_env and (env_path.exists() or env_path.is_symlink()):
        raise UsageError(f"{env_path} exists already: it holds your API key, so init never overwrites it")
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, target in zip(STARTER_FILES, targets, strict=True):
        data = (shipped_dir("starter") / name).read_bytes()  # the wheel's, else the checkout's root
        if name == "composer.toml":
            ref = schema_path(schema_file())
            text = stack_text or reference_stack_text(data.decode("utf-8"), ref)
            data = (with_identity(text, *identity) if identity else text).encode("utf-8")
        replace_file(target, data, 0o644)
        written.append(Written(target))
    if with_env:
        _create_private(env_path, f"VLLM_API_KEY={generated_key()}\n".encode())
        written.append(Written(env_path))
    return written


def _create_private(path: Path, data: bytes) -> None:
    """Create a new file readable only by its owner (never follows or replaces a file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, ENV_MODE)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
