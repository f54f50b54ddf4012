"""MkDocs hook: the configuration reference, generated from the settings tables at build
time (`<!-- settings-reference -->` in a page is replaced by the tables)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MARKER = "<!-- settings-reference -->"
REPO = Path(__file__).resolve().parents[2]


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


def _fields(setting: Any) -> tuple[str, str | None, Any, Any, str]:
    """(key, env, parser, default, description) of a Setting object or a settings tuple."""
    if isinstance(setting, tuple):
        key, env, parse, default = setting[:4]
        description = setting[4] if len(setting) > 4 and isinstance(setting[4], str) else ""
    else:
        key, env, parse, default = setting.key, setting.env, setting.parse, setting.default
        description = getattr(setting, "description", "") or getattr(setting, "help", "") or ""
    return key, env, parse, default, description


def _default(value: Any) -> str:
    if value is None or value == "":
        return "(none)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _accepts(parse: Any) -> str:
    doc = (getattr(parse, "__doc__", None) or "").strip()
    return " ".join(doc.split("\n\n")[0].split()) if doc else ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def settings_keys() -> list[str]:
    """Every documented key, as `table.key`."""
    return [f"{table}.{_fields(s)[0]}" for table, _, settings in _tables() for s in settings]


def render_reference() -> str:
    """The reference as Markdown: one table per settings table."""
    out: list[str] = []
    for table, about, settings in _tables():
        out += [f"## [{table}]", "", about, "", "| key | variable | default | accepts |", "|---|---|---|---|"]
        for setting in settings:
            key, env, parse, default, description = _fields(setting)
            accepts = " ".join(p for p in (description, _accepts(parse)) if p)
            variable = f"`{env}`" if env else ""
            out.append(f"| `{table}.{key}` | {variable} | {_cell(_default(default))} | {_cell(accepts)} |")
        out.append("")
    out += [
        "## [variants.NAME]",
        "",
        "A variant's fields (see [Configuration](configuration.md#adding-a-variant)): "
        + ", ".join(f"`{k}`" for k in sorted(_variant_keys()))
        + "; its `speculative` table: "
        + ", ".join(f"`{k}`" for k in sorted(_speculative_keys()))
        + ".",
        "",
    ]
    return "\n".join(out)


def _variant_keys() -> set[str]:
    from composer.stack.load import VARIANT_KEYS

    return set(VARIANT_KEYS)


def _speculative_keys() -> set[str]:
    from composer.stack.load import SPECULATIVE_KEYS

    return set(SPECULATIVE_KEYS)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs event: replace the marker with the generated tables."""
    return markdown.replace(MARKER, render_reference()) if MARKER in markdown else markdown
