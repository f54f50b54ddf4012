"""A resolved stack as plain data and text, with where each value came from."""

from __future__ import annotations

import json
from dataclasses import asdict

from composer.render.spec import build_spec, resolve
from composer.stack.load import STACK_SETTINGS
from composer.stack.model import Stack, Variant

MASK = "********"


def _variant_data(stack: Stack, variant: Variant) -> dict[str, object]:
    spec = build_spec(stack, variant)
    data: dict[str, object] = {
        "description": variant.description,
        "image": stack.image(variant),
        "image_key": variant.image_key,
        "kv_cache_memory": variant.kv_cache_memory,
        "min_kv_cache_tokens": variant.min_kv_cache_tokens,
        "speculative": asdict(variant.speculative) if variant.speculative else None,
        "env": dict(spec.environment),
        "derived_env": sorted(set(dict(spec.environment)) - {n for n, _ in (*stack.env, *variant.env)}),
        "extra_args": list(variant.extra_args),
        "command": [resolve(arg) for arg in spec.command],
        "config_hash": spec.hash,
    }
    if isinstance(data["speculative"], dict):
        data["speculative"]["extra"] = dict(variant.speculative.extra)  # type: ignore[union-attr]
    return data


def stack_data(stack: Stack, variant: str | None = None) -> dict[str, object]:
    """The resolved stack (one variant or all) with sources; the API key masked."""
    names = [variant] if variant else list(stack.variants)
    settings = {s.key: getattr(stack, s.key) for s in STACK_SETTINGS}
    settings["gpus"] = ",".join(stack.gpus) if stack.gpus else "none"
    return {
        "stack": settings,
        "images": dict(stack.images),
        "variants": {n: _variant_data(stack, stack.variant(n)) for n in names},
        "workloads": dict(stack.workloads),
        "api_key": MASK if stack.api_key else None,
        "sources": dict(stack.sources),
    }


def format_stack(data: dict) -> str:
    """Human-readable form of stack_data()."""
    sources: dict[str, str] = data["sources"]
    rows: list[tuple[str, str, str]] = []
    for key, value in data["stack"].items():
        rows.append((f"stack.{key}", str(value), sources.get(f"stack.{key}", "default")))
    for key, value in data["images"].items():
        rows.append((f"images.{key}", str(value), sources.get(f"images.{key}", "default")))
    for name, variant in data["variants"].items():
        prefix = f"variants.{name}"
        image_source = sources.get(f"images.{variant['image_key']}", "default")
        rows.append((f"{prefix}.image", variant["image"], image_source))
        rows.append(
            (
                f"{prefix}.kv_cache_memory",
                str(variant["kv_cache_memory"]),
                sources.get(f"{prefix}.kv_cache_memory", "default"),
            )
        )
        spec = variant["speculative"]
        if spec:
            for key in ("method", "num_speculative_tokens", "attention_backend", "draft_model"):
                src = sources.get(f"{prefix}.speculative.{key}", "default")
                rows.append((f"{prefix}.speculative.{key}", str(spec[key]), src))
            if spec.get("per_batch_size"):
                src = sources.get(f"{prefix}.speculative.per_batch_size", "default")
                schedule = json.dumps([list(r) for r in spec["per_batch_size"]], separators=(",", ":"))
                rows.append((f"{prefix}.speculative.per_batch_size", schedule, src))
            if spec.get("adaptive_verification"):
                src = sources.get(f"{prefix}.speculative.adaptive_verification", "default")
                rows.append((f"{prefix}.speculative.adaptive_verification", "True", src))
        for env_name, env_value in variant["env"].items():
            env_source = "derived" if env_name in variant["derived_env"] else "composer.toml"
            rows.append((f"{prefix}.env.{env_name}", env_value, env_source))
        rows.append((f"{prefix}.config_hash", variant["config_hash"], "derived"))
    for workload, variant_name in data["workloads"].items():
        rows.append((f"workloads.{workload}", variant_name, "composer.toml"))
    key_source = sources.get("VLLM_API_KEY", "")
    rows.append(("VLLM_API_KEY", data["api_key"] or "(not set)", key_source))
    rows = [(k, val if val.isprintable() else repr(val), src) for k, val, src in rows]
    width = max(len(r[0]) for r in rows)
    value_width = min(max(len(r[1]) for r in rows), 48)
    return "\n".join(f"{k:<{width}}  {val:<{value_width}}  {src}".rstrip() for k, val, src in rows)
