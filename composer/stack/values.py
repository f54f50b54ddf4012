"""Parsers for configuration values: each returns the typed value or raises ValueError
with a short description of what is allowed."""

from __future__ import annotations

import ipaddress
import re

SPECULATIVE_METHODS: tuple[str, ...] = (
    "ngram",
    "draft_model",
    "suffix",
    "custom_class",
    "eagle",
    "eagle3",
    "extract_hidden_states",
    "dflash",
    "ngram_gpu",
    "dspark",
    "mtp",
    "qwen3_next_mtp",
    "qwen3_5_mtp",
    "deepseek_mtp",
    "mimo_mtp",
    "glm4_moe_mtp",
    "ernie_mtp",
    "longcat_flash_mtp",
)
"""vLLM 0.33.0's speculative methods, model-named MTP aliases included."""

MTP_METHODS = frozenset(m for m in SPECULATIVE_METHODS if m == "mtp" or m.endswith("_mtp"))
V2_RUNNER_METHODS = frozenset({"dflash", "dspark"})
"""Methods that force vLLM's V2 model runner, which needs pinned memory (UVA)."""
DRAFT_MODEL_METHODS = frozenset({"draft_model", "eagle", "eagle3", "dflash", "dspark"})

ATTENTION_BACKENDS: tuple[str, ...] = (
    "FLASH_ATTN",
    "TRITON_ATTN",
    "FLASHINFER",
    "FLEX_ATTENTION",
    "FLASHMLA",
    "FLASH_ATTN_MLA",
    "TRITON_MLA",
    "CUTLASS_MLA",
    "FLASHINFER_MLA",
    "TREE_ATTN",
    "ROCM_ATTN",
    "ROCM_AITER_FA",
    "CPU_ATTN",
    "TORCH_SDPA",
)

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B?|[kmgt]B?|B)?\s*$")
_BINARY = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
SIZE_HELP = "a size such as 4831838208, 4.5GiB, 4.5G (GiB) or 4.5GB (SI)"


def parse_size(raw: object) -> int:
    """Bytes from an int or a human size: `4.5GiB`/`4.5G` are binary, `4.5GB`/`4.5g` SI."""
    if isinstance(raw, bool):
        raise ValueError(SIZE_HELP)
    if isinstance(raw, int):
        if raw <= 0:
            raise ValueError(SIZE_HELP)
        return raw
    match = _SIZE.match(str(raw))
    if not match:
        raise ValueError(SIZE_HELP)
    number, unit = float(match.group(1)), match.group(2) or "B"
    if unit == "B":
        factor = 1
    elif unit[0] in _BINARY and (len(unit) == 1 or unit[1] == "i"):
        factor = _BINARY[unit[0]]
    else:
        factor = _DECIMAL[unit[0].lower()]
    size = int(number * factor)
    if size <= 0:
        raise ValueError(SIZE_HELP)
    return size


def parse_positive_int(raw: object) -> int:
    """A whole number greater than zero."""
    if isinstance(raw, bool):
        raise ValueError("a positive integer")
    if isinstance(raw, int):
        value = raw
    elif re.fullmatch(r"\s*[0-9]+\s*", str(raw)):
        value = int(str(raw))
    else:
        raise ValueError("a positive integer")
    if value <= 0:
        raise ValueError("a positive integer")
    return value


def parse_port(raw: object) -> int:
    """A TCP port, 1-65535."""
    try:
        value = parse_positive_int(raw)
    except ValueError as err:
        raise ValueError("a port number from 1 to 65535") from err
    if value > 65535:
        raise ValueError("a port number from 1 to 65535")
    return value


def parse_duration(raw: object) -> int:
    """Seconds from an int or `90s`, `15m`, `1h`."""
    text = str(raw).strip()
    match = re.fullmatch(r"([0-9]+)\s*([smh]?)", text)
    if isinstance(raw, bool) or not match:
        raise ValueError("a duration such as 900, 90s, 15m or 1h")
    return int(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def parse_gpus(raw: object) -> tuple[str, ...] | None:
    """GPU device ids (`0,1,2,3`, a list, or `all`), or None for `none`."""
    items = [str(i) for i in raw] if isinstance(raw, list) else str(raw).split(",")
    items = [i.strip() for i in items if i.strip()]
    allowed = "a GPU list such as 0,1,2,3, 'all', or 'none'"
    if len(items) == 1 and items[0].lower() == "none":
        return None
    if len(items) == 1 and items[0].lower() == "all":
        return ("all",)
    if not items or not all(re.fullmatch(r"[0-9]+|GPU-[0-9a-fA-F-]+", i) for i in items):
        raise ValueError(allowed)
    return tuple(items)


def parse_method(raw: object) -> str:
    """A speculative method known to vLLM."""
    if str(raw) not in SPECULATIVE_METHODS:
        raise ValueError("one of " + ", ".join(SPECULATIVE_METHODS))
    return str(raw)


def parse_attention_backend(raw: object) -> str:
    """An attention backend name (case-insensitive), kept as written."""
    if not str(raw).isascii() or str(raw).upper() not in ATTENTION_BACKENDS:
        raise ValueError("one of " + ", ".join(b.lower() for b in ATTENTION_BACKENDS))
    return str(raw)


def parse_text(raw: object) -> str:
    """Any non-empty string without NUL bytes (or bytes that are not UTF-8)."""
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        raise ValueError("a non-empty string")
    text = str(raw)
    if not text or "\x00" in text or any("\ud800" <= c <= "\udfff" for c in text):
        raise ValueError("a non-empty UTF-8 string without NUL bytes")
    return text


def parse_container_path(raw: object) -> str:
    """An absolute path inside the container (Docker refuses relative mount targets)."""
    text = parse_text(raw)
    if not text.startswith("/") or any(c < " " or c == "\x7f" for c in text):
        raise ValueError(
            "an absolute path inside the container without control characters, such as /models/m"
        )
    return text


def parse_served_name(raw: object) -> str:
    """A served model name; it may not start with '-', which vLLM would read as a flag."""
    text = parse_text(raw)
    if text.startswith("-"):
        raise ValueError("a non-empty name that does not start with '-'")
    return text


def parse_ip(raw: object) -> str:
    """An IPv4 or IPv6 address to bind a published port to."""
    text = str(raw).strip()
    try:
        return str(ipaddress.ip_address(text))
    except ValueError as err:
        raise ValueError("an IP address such as 127.0.0.1, 0.0.0.0 or ::1") from err


def parse_name(raw: object) -> str:
    """A compose project or service name: lowercase letters, digits, '-' and '_'."""
    text = str(raw)
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", text):
        raise ValueError("lowercase letters, digits, '-' and '_', starting with a letter or digit")
    return text


def parse_bool(raw: object) -> bool:
    """true/false (also 1/0, yes/no)."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise ValueError("true or false")


RESTART_POLICIES: tuple[str, ...] = ("no", "always", "on-failure", "unless-stopped")


def parse_restart(raw: object) -> str:
    """A Docker restart policy: no, always, on-failure or unless-stopped."""
    text = "no" if raw is False else str(raw).strip()
    if text not in RESTART_POLICIES:
        raise ValueError("one of " + ", ".join(RESTART_POLICIES))
    return text
