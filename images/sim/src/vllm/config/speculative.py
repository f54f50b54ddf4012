"""Parse and validate ``--speculative-config`` like vLLM's pydantic ``SpeculativeConfig``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm.config.speculative_methods import MTP_ALIASES, SPECULATIVE_METHODS

PYDANTIC_DOCS = "https://errors.pydantic.dev/2.12/v"

_FIELDS: dict[str, type | tuple[type, ...]] = {
    "method": str,
    "model": str,
    "num_speculative_tokens": int,
    "draft_tensor_parallel_size": int,
    "attention_backend": str,
    "max_model_len": int,
    "quantization": str,
    "parallel_drafting": bool,
    "enforce_eager": bool,
    "draft_sample_method": str,
    "prompt_lookup_min": int,
    "prompt_lookup_max": int,
    "revision": str,
    "code_revision": str,
    "disable_padded_drafter_batch": bool,
    "speculative_token_tree": str,
    "num_speculative_tokens_per_batch_size": list,
    "enable_adaptive_verification": bool,
}


class ArgsKwargs:
    """The input of a model-level validator, shown as pydantic shows it."""

    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        self.kwargs = dict(kwargs)

    def __repr__(self) -> str:
        return f"ArgsKwargs((), {self.kwargs!r})"


@dataclass(frozen=True)
class FieldError:
    """One pydantic-style error line."""

    location: str
    message: str
    kind: str
    value: Any


class ValidationError(ValueError):
    """Mimics ``pydantic_core.ValidationError`` text for ``SpeculativeConfig``."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__(self.render())

    def render(self) -> str:
        count = len(self.errors)
        noun = "error" if count == 1 else "errors"
        lines = [f"{count} validation {noun} for SpeculativeConfig"]
        for err in self.errors:
            if err.location:  # a model-level validator's error has no field line
                lines.append(err.location)
            lines.append(
                f"  {err.message} [type={err.kind}, input_value={err.value!r}, "
                f"input_type={type(err.value).__name__}]"
            )
            lines.append(f"    For further information visit {PYDANTIC_DOCS}/{err.kind}")
        return "\n".join(lines)


@dataclass(frozen=True)
class SpeculativeConfig:
    """The validated speculative decoding settings."""

    method: str
    num_speculative_tokens: int | None
    model: str | None = None
    attention_backend: str | None = None
    draft_tensor_parallel_size: int | None = None
    requested_method: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


def _literal_message(choices: tuple[str, ...]) -> str:
    quoted = [f"'{c}'" for c in choices]
    return "Input should be " + ", ".join(quoted[:-1]) + " or " + quoted[-1]


def _check_types(data: Mapping[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    for key, value in data.items():
        expected = _FIELDS.get(key)
        if expected is None:
            errors.append(FieldError(key, "Extra inputs are not permitted", "extra_forbidden", value))
        elif expected is int and (isinstance(value, bool) or not isinstance(value, int)):
            errors.append(FieldError(key, "Input should be a valid integer", "int_type", value))
        elif expected is str and not isinstance(value, str):
            errors.append(FieldError(key, "Input should be a valid string", "string_type", value))
        elif expected is list and value is not None and not isinstance(value, list):
            errors.append(FieldError(key, "Input should be a valid list", "list_type", value))
    return errors


def parse_speculative_config(raw: str | Mapping[str, Any]) -> SpeculativeConfig:
    """Validate a speculative config (JSON text or mapping).

    Raises :class:`ValidationError` for pydantic-level problems and vLLM's model-level
    validators (``tensor_parallel_size`` inside the config), ``ValueError`` for other checks.
    """
    data = json.loads(raw) if isinstance(raw, str) else dict(raw)
    if not isinstance(data, Mapping):
        raise ValueError("speculative_config must be a JSON object")
    if "tensor_parallel_size" in data:
        message = (
            "Value error, 'tensor_parallel_size' is not a valid argument in the speculative_config. "
            "Please pass 'draft_tensor_parallel_size' instead."
        )
        raise ValidationError([FieldError("", message, "value_error", ArgsKwargs(data))])
    errors = _check_types(data)
    method = data.get("method")
    if method is not None and isinstance(method, str) and method not in SPECULATIVE_METHODS:
        errors.append(FieldError("method", _literal_message(SPECULATIVE_METHODS), "literal_error", method))
    k = data.get("num_speculative_tokens")
    if isinstance(k, int) and not isinstance(k, bool) and k <= 0:
        errors.append(
            FieldError("num_speculative_tokens", "Input should be greater than 0", "greater_than", k)
        )
    if errors:
        raise ValidationError(errors)
    if method is None:
        if data.get("model"):
            method = "draft_model"
        elif data.get("prompt_lookup_max") or data.get("prompt_lookup_min"):
            method = "ngram"
        else:
            raise ValueError("speculative_config needs 'method' (or a draft 'model')")
    requested = method
    if method in MTP_ALIASES:
        method = "mtp"
    known = {"method", "model", "num_speculative_tokens", "attention_backend", "draft_tensor_parallel_size"}
    return SpeculativeConfig(
        method=method,
        num_speculative_tokens=k,
        model=data.get("model"),
        attention_backend=data.get("attention_backend"),
        draft_tensor_parallel_size=data.get("draft_tensor_parallel_size"),
        requested_method=requested,
        extra={key: v for key, v in data.items() if key not in known},
    )
