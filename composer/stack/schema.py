"""The JSON Schema of composer.toml, generated from the settings table (`settings.KEYS`).

Committed as `schema/composer.schema.json` (`compose-spec config --schema`); stack files
point to it with a `#:schema` comment for editors.
"""

from __future__ import annotations

from typing import Any

from composer.stack.settings import KEYS, SPECULATIVE, VARIANT, Key
from composer.stack.workload_classes import WORKLOAD_PATTERN

_DIGITS = r"^\s*[0-9]+\s*$"
_SIZE = r"^\s*[0-9]+(\.[0-9]+)?\s*([KMGT]i?B?|[kmgt]B?|B)?\s*$"
_DURATION = r"^\s*[0-9]+\s*[smh]?\s*$"
_ENV_TABLE = {
    "type": "object",
    "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
    "additionalProperties": {"type": ["string", "number"]},
}


def _value_schema(key: Key) -> dict[str, Any]:
    kinds: dict[str, dict[str, Any]] = {
        "string": {"type": "string"},
        "path": {"type": "string"},
        "integer": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": _DIGITS}]},
        "count": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": _DIGITS}]},
        "boolean": {"type": "boolean"},
        "size": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": _SIZE}]},
        "duration": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": _DURATION}]},
        "fraction": {"type": "number", "minimum": 0, "maximum": 1},
        "gpus": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": ["string", "integer"]}}]},
        "list": {"type": "array", "items": {"type": "string"}},
        "table": dict(_ENV_TABLE),
        "object": {"type": "object"},
        "objects": {"type": "array", "items": {"type": "object"}},
        "schedule": {
            "type": "array",
            "items": {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 3},
        },
    }
    if key.kind == "enum":
        lowered = [c.lower() for c in key.choices if c.lower() != c]
        schema: dict[str, Any] = {"enum": [*key.choices, *lowered]}
        if key.name == "sleep_level":
            schema = {"enum": [1, 2]}
    else:
        schema = dict(kinds[key.kind])
    schema["description"] = key.description
    return schema


def _table(table: str, overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    properties = {k.name: _value_schema(k) for k in KEYS if k.table == table}
    properties.update(overrides or {})
    return {"type": "object", "additionalProperties": False, "properties": properties}


def json_schema() -> dict[str, Any]:
    """The schema: every table and key, unknown keys refused, each key described."""
    speculative = _table(
        SPECULATIVE, {"extra": {"type": "object", "description": "more speculative_config fields"}}
    )
    variant = _table(
        VARIANT,
        {
            "speculative": {"anyOf": [{"const": "none"}, speculative], "description": 'a table, or "none"'},
            "env": {**_ENV_TABLE, "description": "environment variables of this variant"},
        },
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "compose-spec stack file (composer.toml)",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "stack": _table("stack", {"env": {**_ENV_TABLE, "description": "environment of every variant"}}),
            "images": {
                "type": "object",
                "description": "image references by key (a variant's image names a key)",
                "propertyNames": {"pattern": "^[a-z][a-z0-9_-]*$"},
                "additionalProperties": {"type": "string"},
            },
            "variants": {
                "type": "object",
                "description": "one table per variant",
                "propertyNames": {"pattern": "^[a-z0-9][a-z0-9_-]*$"},
                "additionalProperties": variant,
            },
            "workloads": {
                "type": "object",
                "description": "workload class (BUCKET[TOKENS]-STREAMS: chat-1, medium-4, long-16) "
                "-> the variant that serves it",
                "propertyNames": {"pattern": WORKLOAD_PATTERN},
                "additionalProperties": {"type": "string"},
            },
            "gateway": _table("gateway"),
            "kubernetes": _table("kubernetes"),
        },
    }
