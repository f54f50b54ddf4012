"""MkDocs hook: the configuration reference, generated from the settings tables at build
time (`<!-- settings-reference -->` in a page is replaced by the tables).

What a key does is its one-line description in `composer.stack.settings.KEYS` (what
`config --keys` prints); its default comes from the loader's tables, written the way a
stack writes it: durations as `15m`, sizes as `8 GiB`, lists and tables as TOML, and the
default the loader derives where it derives one (`gateway.hold_timeout`)."""

from __future__ import annotations

import html
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MARKER = "<!-- settings-reference -->"
REPO = Path(__file__).resolve().parents[2]
UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _tables() -> list[tuple[str, str, Iterable[Any]]]:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from composer.stack.gateway import GATEWAY_SETTINGS
    from composer.stack.kubernetes import KUBE_SETTINGS
    from composer.stack.load import STACK_SETTINGS

    return [
        ("stack", "Shared settings of every variant.", STACK_SETTINGS),
        ("gateway", "The gateway in front of the variants ([the gateway](gateway.md)).", GATEWAY_SETTINGS),
        ("kubernetes", "`up --target kubernetes` ([Kubernetes](kubernetes.md)).", KUBE_SETTINGS),
    ]


def _keys() -> dict[str, Any]:
    """`table.key` -> its `settings.Key` (description, kind, choices)."""
    from composer.stack.settings import KEYS

    return {key.dotted: key for key in KEYS}


def _fields(setting: Any) -> tuple[str, str | None, Any]:
    """(key, env, default) of a Setting object or a settings tuple."""
    if isinstance(setting, tuple):
        return setting[0], setting[1], setting[3]
    return setting.key, setting.env, setting.default


def duration_text(seconds: int) -> str:
    """`15m`, `30s`, `1h`, `1m30s` (0: `0`)."""
    if seconds == 0:
        return "0"
    parts = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts)


def size_text(value: int | str) -> str:
    """`8 GiB`, `1.3 GiB`, `64 KiB`, or bytes below 1 KiB."""
    from composer.stack.values import parse_size

    size = parse_size(value)
    for unit, scale in UNITS:
        if size >= scale:
            return f"{round(size / scale, 1):g} {unit}"
    return f"{size} bytes"


def toml_text(value: Any) -> str:
    """A value as TOML writes it inline."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        inner = ", ".join(f"{k} = {toml_text(v)}" for k, v in value.items())
        return f"{{ {inner} }}" if inner else "{}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    return str(value)


def default_text(dotted: str, kind: str, default: Any, defaults: dict[str, Any]) -> str:
    """The default as a stack writes it (Markdown), the effective one where the loader derives it."""
    note = ""
    if dotted == "gateway.hold_timeout":  # composer.stack.load: the default follows the start budget
        start = defaults["stack.start_period"]
        note = " (`stack.start_period`)" if start > default else ""
        default = max(default, start)
    if default is None or default == "":
        return "(none)"
    if kind == "duration":
        text = duration_text(int(default))
    elif kind == "size":
        text = size_text(default)
    elif kind in ("boolean", "list", "objects", "object", "table") or isinstance(
        default, list | tuple | dict
    ):
        text = toml_text(default)
    else:
        text = str(default)
    return f"`{text}`{note}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def key_cell(dotted: str) -> str:
    """The key, never broken across lines."""
    return f'<code style="white-space: nowrap">{html.escape(dotted)}</code>'


def _does(key: Any) -> str:
    choices = f" (one of: {', '.join(key.choices)})" if key.choices else ""
    return _cell(key.description + choices)


def settings_keys() -> list[str]:
    """Every documented key, as `table.key`."""
    return [f"{table}.{_fields(s)[0]}" for table, _, settings in _tables() for s in settings]


def render_reference() -> str:
    """The reference as Markdown: one table per settings table, then the variant keys."""
    keys = _keys()
    defaults = {
        f"{table}.{_fields(s)[0]}": _fields(s)[2] for table, _, settings in _tables() for s in settings
    }
    out: list[str] = []
    for table, about, settings in _tables():
        out += [
            f"## [{table}]",
            "",
            about,
            "",
            "| key | what it does | default | variable |",
            "|---|---|---|---|",
        ]
        for setting in settings:
            name, env, default = _fields(setting)
            key = keys[f"{table}.{name}"]
            variable = f"`{env}`" if env else ""
            shown = default_text(key.dotted, key.kind, default, defaults)
            out.append(f"| {key_cell(key.dotted)} | {_does(key)} | {_cell(shown)} | {variable} |")
        out.append("")
    out += [
        "## [variants.NAME]",
        "",
        "A variant's keys (see [Configuration](configuration.md#adding-a-variant)); a variant",
        "without a key takes it from the variant it `extends`.",
        "",
        "| key | what it does |",
        "|---|---|",
    ]
    out += [
        f"| {key_cell(k.dotted)} | {_does(k)} |" for k in keys.values() if k.table.startswith("variants.")
    ]
    out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs event: replace the marker with the generated tables."""
    return markdown.replace(MARKER, render_reference()) if MARKER in markdown else markdown
