"""A resolved stack as plain data and text, with where each value came from."""

from __future__ import annotations

import json
from dataclasses import asdict

from composer.render.spec import build_spec, resolve
from composer.stack.load import STACK_SETTINGS
from composer.stack.model import Stack, Variant
from composer.stack.settings import KEYS, SPECULATIVE, VARIANT, Key
from composer.stack.values import format_seconds

MASK = "********"


def shown_value(value: object, kind: str = "string") -> str:
    """A value as a user writes it in composer.toml: `true`, `15m`, `7.0GiB`, `0,1`."""
    if value is None:
        return "(not set)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if kind == "duration" and isinstance(value, int | float):
        return format_seconds(value)
    if kind == "size" and isinstance(value, int):
        for unit, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= factor and value * 10 % factor == 0:  # exact to one decimal: as parse_size reads it
                return f"{value / factor:.1f}{unit}"
        return str(value)
    if isinstance(value, dict) or (
        isinstance(value, list | tuple) and any(isinstance(i, dict | list | tuple) for i in value)
    ):
        return json.dumps(value, separators=(",", ":")) if value else "(none)"
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value) if value else "(none)"
    if value == "":
        return "(empty)"
    return str(value)


def _stack_settings(stack: Stack) -> dict[str, object]:
    settings = {s.key: getattr(stack, s.key) for s in STACK_SETTINGS}
    settings["gpus"] = ",".join(stack.gpus) if stack.gpus else "none"
    return settings


def _row(stack: Stack, dotted: str, key: Key, resolved: object) -> dict[str, str]:
    source = stack.sources.get(dotted) or ("composer.toml" if resolved not in (None, "", []) else "default")
    raw = stack.written.get(dotted, resolved)  # as written, defaults included (`1.3G`, 900)
    return {
        "key": dotted,
        "value": shown_value(raw, key.kind),
        "source": source,
        "description": key.description,
    }


def settings_rows(stack: Stack, variants: list[str]) -> list[dict[str, str]]:
    """Every settable key with its value as written, its source and a description."""
    values = {f"stack.{k}": v for k, v in _stack_settings(stack).items()}
    values |= {f"gateway.{k}": v for k, v in asdict(stack.gateway).items()}
    values |= {f"kubernetes.{k}": v for k, v in asdict(stack.kubernetes).items()}
    rows = [
        _row(stack, k.dotted, k, values[k.dotted])
        for k in KEYS
        if k.table in ("stack", "gateway", "kubernetes") and k.kind != "table"
    ]
    rows += [
        {
            "key": f"images.{n}",
            "value": ref,
            "source": stack.sources.get(f"images.{n}", "default"),
            "description": "image reference",
        }
        for n, ref in stack.images.items()
    ]
    for name in variants:
        variant = stack.variant(name)
        for key in KEYS:
            if key.table == VARIANT and key.name not in ("extends", "speculative", "env", "gpus", "replicas"):
                value = getattr(variant, "image_key" if key.name == "image" else key.name)
                value = list(value) if isinstance(value, tuple) else value
                rows.append(_row(stack, f"variants.{name}.{key.name}", key, value))
        if variant.speculative:
            for key in (k for k in KEYS if k.table == SPECULATIVE and k.kind != "table"):
                dotted = f"variants.{name}.speculative.{key.name}"
                rows.append(_row(stack, dotted, key, getattr(variant.speculative, key.name)))
    return rows


def _variant_data(stack: Stack, variant: Variant) -> dict[str, object]:
    spec = build_spec(stack, variant)
    return {
        "description": variant.description,
        "image": stack.image(variant.image_key),
        "image_key": variant.image_key,
        "kv_cache_memory": variant.kv_cache_memory,
        "min_kv_cache_tokens": variant.min_kv_cache_tokens,
        "speculative": {**asdict(spec_), "extra": dict(spec_.extra)}
        if (spec_ := variant.speculative)
        else None,
        "env": dict(spec.environment),
        "derived_env": sorted(set(dict(spec.environment)) - {n for n, _ in (*stack.env, *variant.env)}),
        "extra_args": list(variant.extra_args),
        "aliases": list(variant.aliases),
        "command": [resolve(arg) for arg in spec.command],
        "config_hash": spec.hash,
    }


def stack_data(stack: Stack, variant: str | None = None) -> dict[str, object]:
    """The resolved stack (one variant or all) with sources; the API key masked."""
    names = [variant] if variant else list(stack.variants)
    return {
        "settings": settings_rows(stack, names),
        "stack": _stack_settings(stack),
        "images": dict(stack.images),
        "variants": {n: _variant_data(stack, stack.variant(n)) for n in names},
        "workloads": dict(stack.workloads),
        "api_key": MASK if stack.api_key else None,
        "sources": dict(stack.sources),
    }


def format_stack(data: dict) -> str:
    """Human-readable form of stack_data(): key, value as written, source, description."""
    rows: list[tuple[str, str, str, str]] = [
        (r["key"], r["value"], r["source"], r["description"]) for r in data["settings"]
    ]
    for name, variant in data["variants"].items():
        prefix = f"variants.{name}"
        for env_name, env_value in variant["env"].items():
            env_source = (
                "derived"
                if env_name in variant["derived_env"]
                else data["sources"].get(f"{prefix}.env.{env_name}")
                or data["sources"].get(f"stack.env.{env_name}", "composer.toml")
            )
            rows.append((f"{prefix}.env.{env_name}", env_value, env_source, ""))
        rows.append((f"{prefix}.config_hash", variant["config_hash"], "derived", "what decides a rebuild"))
    for workload, variant_name in data["workloads"].items():
        source = data["sources"].get(f"workloads.{workload}", "composer.toml")
        rows.append((f"workloads.{workload}", variant_name, source, "variant that serves it"))
    key_source = data["sources"].get("VLLM_API_KEY", "")
    rows.append(("VLLM_API_KEY", data["api_key"] or "(not set)", key_source, "the API key (masked)"))
    rows = [(k, val if val.isprintable() else repr(val), src, d) for k, val, src, d in rows]
    rows = [(k, val if len(val) <= 40 else val[:39] + "~", src, d) for k, val, src, d in rows]
    width = max(len(r[0]) for r in rows)
    value_width = min(max(len(r[1]) for r in rows), 40)
    source_width = max(len(r[2]) for r in rows)
    return "\n".join(
        f"{k:<{width}}  {val:<{value_width}}  {src:<{source_width}}  {d}".rstrip() for k, val, src, d in rows
    )


def format_keys() -> str:
    """Every settable key: its dotted name, kind (with the choices of an enum) and description."""
    rows = []
    for key in KEYS:
        kind = key.kind if key.kind != "enum" else "|".join(c.lower() for c in key.choices)
        if len(kind) > 40:
            kind = "one of: see the description"
        rows.append((key.dotted, kind, key.description))
    width = max(len(r[0]) for r in rows)
    kind_width = max(len(r[1]) for r in rows)
    return "\n".join(f"{k:<{width}}  {t:<{kind_width}}  {d}" for k, t, d in rows)
