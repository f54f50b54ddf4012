"""Find and read the raw inputs of a stack: composer.toml files and the .env file."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from dotenv import dotenv_values

from composer.errors import ConfigError

DEFAULT_STACK_FILE = "composer.toml"
DEFAULT_ENV_FILE = ".env"
STACK_FILES_VAR = "COMPOSER_STACK"
TOP_KEYS = {"stack", "images", "variants", "workloads", "kubernetes"}


def find_stack_files(
    given: Sequence[str | Path] | None, environ: Mapping[str, str], dotenv: Mapping[str, str]
) -> list[Path]:
    """--stack files, else COMPOSER_STACK (environment, then .env; ':'-separated), else composer.toml."""
    if given:
        return [Path(p) for p in given]
    listed = environ.get(STACK_FILES_VAR) or dotenv.get(STACK_FILES_VAR)
    if listed:
        return [Path(p) for p in listed.split(os.pathsep) if p]
    return [Path(DEFAULT_STACK_FILE)]


def files_read_note(files: Sequence[Path]) -> str:
    """` (read: a.toml; composer.toml here was not read: ...)` for errors about a missing table.

    `--stack` replaces composer.toml (like `docker compose -f`); say so when one was
    left out, since that is the usual reason a table is missing."""
    shown = ", ".join(str(p) for p in files) or "no stack file"
    default = Path(DEFAULT_STACK_FILE)
    skipped = default.is_file() and all(p.resolve() != default.resolve() for p in files)
    if not skipped:
        return f" (stack files read: {shown})"
    return (
        f" (stack files read: {shown}; {DEFAULT_STACK_FILE} here was not read because --stack "
        f"(or COMPOSER_STACK) replaces it: list it first, e.g. --stack {DEFAULT_STACK_FILE} "
        f"--stack {files[0] if files else 'FILE'})"
    )


def read_dotenv(path: str | Path | None) -> tuple[dict[str, str], Path | None]:
    """The env file's values and its path; the default .env may be absent, a named file may not."""
    if path is None:
        return {}, None
    path = Path(path)
    if not path.is_file():
        if str(path) != DEFAULT_ENV_FILE:
            raise ConfigError(f"env file {str(path)!r} does not exist: give an existing file")
        return {}, None
    refuse_expansions(path)
    parsed = dotenv_values(path, interpolate=False)
    return {k: val for k, val in parsed.items() if val is not None}, path.resolve()


def refuse_expansions(path: Path) -> None:
    """compose expands `$` in unquoted and double-quoted env-file values; compose-spec
    reads them literally. Refuse the ambiguity instead of rendering a different value."""
    from dotenv.parser import parse_stream

    with path.open(encoding="utf-8") as stream:
        for binding in parse_stream(stream):
            if binding.key and binding.value and "$" in binding.value:
                raw = binding.original.string.partition("=")[2].lstrip()
                if not raw.startswith("'"):
                    raise ConfigError(
                        f"{path}:{binding.original.line}: {binding.key} contains '$', which compose would "
                        f"expand: single-quote the value ({binding.key}='...') to keep it literal"
                    )


def read_toml(files: Sequence[Path]) -> tuple[dict, dict[str, Path]]:
    """The stack files merged in order, and the file that set each dotted key."""
    merged: dict = {}
    origin: dict[str, Path] = {}
    for path in files:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"stack file {str(path)!r} does not exist") from None
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"stack file {str(path)!r} is not valid TOML: {err}") from err
        unknown = set(data) - TOP_KEYS
        if unknown:
            raise ConfigError(
                f"{path}: unknown table {sorted(unknown)[0]!r}: allowed are " + ", ".join(sorted(TOP_KEYS))
            )
        merge(merged, data, origin, "", path.resolve())
    return merged, origin


def merge(into: dict, new: dict, origin: dict[str, Path], prefix: str, path: Path) -> None:
    """Deep-merge `new` into `into`, recording `path` as the origin of every key it sets."""
    for key, value in new.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            if not isinstance(into.get(key), dict):
                into[key] = {}
            merge(into[key], value, origin, dotted + ".", path)
        else:
            into[key] = value
        origin[dotted] = path
