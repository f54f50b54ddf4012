"""Find and read the raw inputs of a stack: composer.toml files and the .env file."""

from __future__ import annotations

import io
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from dotenv import dotenv_values

from composer.errors import ConfigError
from composer.stack import values as v
from composer.stack.bounded import STACK_FILE_LIMIT, read_bounded
from composer.stack.keys import is_secret_name

DEFAULT_STACK_FILE = "composer.toml"
DEFAULT_ENV_FILE = ".env"
STACK_FILES_VAR = "COMPOSER_STACK"
TOP_KEYS = {"stack", "images", "variants", "workloads", "kubernetes", "gateway"}


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
    """The stack files read, for an error about a missing table; names a composer.toml `--stack` left out."""
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


ENV_LINE_HELP = "NAME=value lines (quote a value with '...' or \"...\"), comments and blank lines"


def read_text(path: Path, what: str) -> str:
    """A stack or env file's UTF-8 text (at most `STACK_FILE_LIMIT` bytes), or a ConfigError why not."""
    shown = repr(str(path))
    try:
        return read_bounded(path, what, STACK_FILE_LIMIT).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} {shown} does not exist: give an existing file") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {shown} is a directory: give a file") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{what} {shown} is not UTF-8 text (byte {err.start}): save it as UTF-8") from None
    except OSError as err:
        raise ConfigError(f"{what} {shown} cannot be read: {err.strerror or err}") from None
    except ValueError:  # a NUL byte in the name
        raise ConfigError(f"{what} {shown} is not a valid file name: give an existing file") from None


def read_dotenv(path: str | Path | None) -> tuple[dict[str, str], Path | None]:
    """The env file's values and its path; the default .env may be absent, a named file may not."""
    if path is None:
        return {}, None
    path = Path(path)
    if str(path) == DEFAULT_ENV_FILE and not path.exists():
        return {}, None
    text = read_text(path, "env file")
    check_env_lines(path, text)
    parsed = dotenv_values(stream=io.StringIO(text), interpolate=False)
    return {k: val for k, val in parsed.items() if val is not None}, path.resolve()


def check_env_lines(path: Path, text: str) -> None:
    """Refuse what `docker compose --env-file` refuses, and an unquoted `$`, naming file and line."""
    from dotenv.parser import parse_stream

    for binding in parse_stream(io.StringIO(text)):
        original = binding.original.string
        # A binding starts with the blank lines before it: count from its first text.
        line = binding.original.line + original[: len(original) - len(original.lstrip())].count("\n")
        if binding.error:
            raise ConfigError(
                f"{path}:{line}: cannot parse {shown_env_line(binding.original.string)}: "
                f"expected {ENV_LINE_HELP}"
            )
        if binding.key and binding.value is None:
            shown_key = shown_env_line(binding.key)
            expected = binding.key if shown_key == v.shown(binding.key, 40) else "NAME"
            raise ConfigError(
                f"{path}:{line}: {shown_key} has no '=': expected {expected}=value "
                "(an empty value NAME= counts as unset)"
            )
        if binding.key and binding.value and "$" in binding.value:
            raw = binding.original.string.partition("=")[2].lstrip()
            if not raw.startswith("'"):
                raise ConfigError(
                    f"{path}:{line}: {binding.key} contains '$', which compose would "
                    f"expand: single-quote the value ({binding.key}='...') to keep it literal"
                )


_LINE_NAME = re.compile(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)")


def shown_env_line(text: str) -> str:
    """An env-file line for an error message: a secret's line by its name, a lone word by its length."""
    text = text.strip()
    named = _LINE_NAME.match(text)
    if named and is_secret_name(named.group(1)):
        return f"{named.group(1)}=... (the value is not shown)"
    lone = text and not any(c.isspace() or c in "=#" for c in text)
    if lone and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        return f"a word of {len(text)} characters (not shown: it may be a secret)"
    return v.shown(text, 40)


def read_toml(files: Sequence[Path]) -> tuple[dict, dict[str, Path]]:
    """The stack files merged in order, and the file that set each dotted key."""
    merged: dict = {}
    origin: dict[str, Path] = {}
    for path in files:
        text = read_text(path, "stack file")
        try:
            data = tomllib.loads(text)
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
