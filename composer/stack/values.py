"""Parsers for configuration values: each returns the typed value or raises ValueError
with a short description of what is allowed."""

from __future__ import annotations

import functools
import ipaddress
import posixpath
import re
from collections.abc import Callable
from fractions import Fraction

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
V2_RUNNER_METHODS = frozenset({"dflash", "dspark"})  # force vLLM's V2 runner, which needs pinned memory

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

_SIZE = re.compile(r"^\s*([0-9]{1,30}(?:\.[0-9]{1,30})?)\s*([KMGT]i?B?|[kmgt]B?|B)?\s*$", re.ASCII)
_BINARY = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
INT64_MAX = (1 << 63) - 1  # vLLM, Docker and compose read these numbers as 64-bit signed integers
SIZE_HELP = "a size such as 4831838208, 4.5GiB, 4.5G (GiB) or 4.5GB (SI), at most 8 EiB"
MAX_DURATION = INT64_MAX // 10**9  # Docker and compose hold durations as int64 nanoseconds
MAX_SPECULATIVE_TOKENS = 128  # vLLM's MAX_SPEC_LEN: its rejection sampler asserts K <= 128


def parse_size(raw: object) -> int:
    """Bytes from an int or a human size: `4.5GiB`/`4.5G` are binary, `4.5GB`/`4.5g` SI."""
    if isinstance(raw, bool):
        raise ValueError(SIZE_HELP)
    if isinstance(raw, int):
        if not 0 < raw <= INT64_MAX:
            raise ValueError(SIZE_HELP)
        return raw
    if not isinstance(raw, str | float):
        raise ValueError(SIZE_HELP)
    match = _SIZE.match(str(raw))
    if not match:
        raise ValueError(SIZE_HELP)
    number, unit = Fraction(match.group(1)), match.group(2) or "B"
    if unit == "B":
        factor = 1
    elif unit[0] in _BINARY and (len(unit) == 1 or unit[1] == "i"):
        factor = _BINARY[unit[0]]
    else:
        factor = _DECIMAL[unit[0].lower()]
    size = int(number * factor)
    if not 0 < size <= INT64_MAX:
        raise ValueError(SIZE_HELP)
    return size


def parse_positive_int(raw: object, maximum: int = INT64_MAX) -> int:
    """A whole number greater than zero and at most `maximum` (int64 by default)."""
    allowed = "a positive integer" + (f" up to {maximum}" if maximum < INT64_MAX else "")
    if isinstance(raw, bool):
        raise ValueError(allowed)
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and re.fullmatch(r"\s*[0-9]{1,19}\s*", raw, re.ASCII):
        value = int(raw)
    else:
        raise ValueError(allowed)
    if not 0 < value <= maximum:
        raise ValueError(allowed)
    return value


MAX_LOG_FILES = 100
parse_log_files = functools.partial(parse_positive_int, maximum=MAX_LOG_FILES)
"""How many rotated log files Docker keeps per container (1-100)."""
parse_speculative_tokens = functools.partial(parse_positive_int, maximum=MAX_SPECULATIVE_TOKENS)
"""K, the speculative tokens per step: 1 to vLLM's MAX_SPEC_LEN (128)."""


def parse_port(raw: object) -> int:
    """A TCP port, 1-65535."""
    try:
        return parse_positive_int(raw, 65535)
    except ValueError as err:
        raise ValueError("a port number from 1 to 65535") from err


def parse_duration(raw: object) -> int:
    """Seconds from an int or `90s`, `15m`, `1h`; at most what Docker holds (int64 ns)."""
    allowed = f"a duration such as 900, 90s, 15m or 1h, at most {MAX_DURATION}s"
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise ValueError(allowed)
    match = re.fullmatch(r"([0-9]{1,19})\s*([smh]?)", str(raw).strip(), re.ASCII)
    if not match:
        raise ValueError(allowed)
    seconds = int(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]
    if seconds > MAX_DURATION:
        raise ValueError(allowed)
    return seconds


MAX_PROBATION = 3600


def parse_probation(raw: object) -> int:
    """Seconds `up` watches a swapped-in variant before it is done (0: off), at most an hour."""
    seconds = parse_duration(raw)
    if seconds > MAX_PROBATION:
        raise ValueError(f"a duration such as 30s or 2m, at most {MAX_PROBATION // 60}m (0s turns it off)")
    return seconds


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
    if len(set(items)) != len(items):
        raise ValueError(f"{allowed}, each device once")
    return tuple(items)


def one_of(text: str, choices: tuple[str, ...]) -> str:
    """`text` when it is one of `choices`, else ValueError listing them."""
    if text not in choices:
        raise ValueError("one of " + ", ".join(choices))
    return text


def choice(choices: tuple[str, ...]) -> Callable[[object], str]:
    """A parser of one of `choices` (surrounding spaces ignored)."""
    return lambda raw: one_of(str(raw).strip(), choices)


def parse_method(raw: object) -> str:
    """A speculative method known to vLLM."""
    return one_of(str(raw), SPECULATIVE_METHODS)


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
    """An absolute, normalised container path other than `/`, without `//`, `:` or controls."""
    allowed = (
        "an absolute path inside the container such as /models/m: not '/', no '.' or '..' "
        "components, no '//', trailing '/', ':' or control characters"
    )
    text = parse_text(raw)
    if (
        not text.startswith("/")
        or text == "/"
        or posixpath.normpath(text) != text
        or text.startswith("//")
        or ":" in text
        or any(c < " " or c == "\x7f" for c in text)
    ):
        raise ValueError(allowed)
    return text


def parse_host_path(raw: object) -> str:
    """A host path compose's `${VAR:-default}` can hold (no '}', newline or control characters)."""
    text = parse_text(raw)
    if "}" in text or any(c < " " or c == "\x7f" for c in text):
        raise ValueError("a host path without '}' or control characters (newlines included)")
    return text


# Docker's reference grammar (distribution/reference, regexp.go): [host[:port]/]path[:tag][@digest].
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_DOMAIN = rf"{_DOMAIN_NAME}(?::[0-9]+)?"  # no [IPv6] hosts: Docker 20.10's daemon refuses them
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128}"
IMAGE_REFERENCE = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?",
    re.ASCII,
)
IMAGE_HELP = (
    "an image reference like Docker's: [registry-host[:port]/]path[:tag][@sha256:<64 hex>], "
    "path components in lowercase letters, digits and . _ -, a tag of at most 128 characters "
    "from letters, digits, _ . - (e.g. vllm/vllm-openai:v0.33.0)"
)
NAME_TOTAL_LENGTH_MAX = 255


def parse_image_ref(raw: object) -> str:
    """An image reference Docker accepts (its `reference` grammar), e.g. `repo/name:tag`."""
    if not isinstance(raw, str):
        raise ValueError(IMAGE_HELP)
    match = IMAGE_REFERENCE.fullmatch(raw)
    if not match:
        raise ValueError(IMAGE_HELP)
    name = match.group("name")
    if len(name) > NAME_TOTAL_LENGTH_MAX:
        raise ValueError(f"{IMAGE_HELP}; the name may have at most {NAME_TOTAL_LENGTH_MAX} characters")
    if re.fullmatch(r"[a-f0-9]{64}", name):
        raise ValueError(f"{IMAGE_HELP}; a bare 64-digit hex string is read as an image id, not a name")
    return raw


def parse_served_name(raw: object) -> str:
    """A served model name: one word without controls, not starting with '-' (vLLM: a flag)."""
    text = parse_text(raw)
    if text.startswith("-") or any(c.isspace() or not c.isprintable() for c in text):
        raise ValueError(
            "a non-empty name without whitespace or control characters that does not start with '-'"
        )
    return text


def parse_ip(raw: object) -> str:
    """An IPv4 or IPv6 address (without a %zone) to bind a published port to."""
    allowed = "an IP address such as 127.0.0.1, 0.0.0.0 or ::1 (no %zone)"
    if not isinstance(raw, str) or "%" in raw:
        raise ValueError(allowed)
    try:
        return str(ipaddress.ip_address(raw.strip()))
    except ValueError as err:
        raise ValueError(allowed) from err


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


STANDBY_MODES: tuple[str, ...] = ("stop", "sleep")
parse_standby = choice(STANDBY_MODES)  # what `up` does with a variant it leaves: stop it or sleep
STANDBY_FALLBACKS: tuple[str, ...] = ("refuse", "stop")
parse_standby_fallback = choice(STANDBY_FALLBACKS)  # a sleep standby that does not fit: refuse, or stop


def parse_sleep_level(raw: object) -> int:
    """vLLM's sleep level: 1 (weights to host RAM) or 2 (weights dropped, reloaded on wake)."""
    return int(one_of(str(raw).strip(), ("1", "2")))


def parse_optional_size(raw: object) -> int | None:
    """A size, or nothing (an empty string or "none")."""
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in {"", "none"}):
        return None
    return parse_size(raw)


def parse_fraction(raw: object) -> float:
    """A number from 0 to 1 (a share, such as an acceptance rate)."""
    try:
        value = float(str(raw).strip()) if not isinstance(raw, bool) else -1.0
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise ValueError("a number from 0 to 1, e.g. 0.05")
    return value


RESTART_POLICIES: tuple[str, ...] = ("no", "always", "on-failure", "unless-stopped")


def parse_restart(raw: object) -> str:
    """A Docker restart policy: no, always, on-failure or unless-stopped."""
    return one_of("no" if raw is False else str(raw).strip(), RESTART_POLICIES)


def shown(value: object, limit: int = 80) -> str:
    """A value for an error message: its repr, cut to about `limit` characters."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        text = f"<{type(value).__name__}>"
    if len(text) <= limit:
        return text
    return f"{text[: limit - 20]}... ({len(text)} characters)"


API_KEY_HELP = "printable ASCII without spaces (letters, digits and punctuation), as HTTP headers carry it"


def is_header_safe(key: str) -> bool:
    """True when a key can travel in an `Authorization: Bearer` header unchanged."""
    return bool(key) and all("!" <= c <= "~" for c in key)


_SPAN = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,9})?)\s*(ms|s|m|h)?", re.ASCII)
SECONDS_HELP = "a duration such as 900, 1.5, 90s, 500ms, 15m, 1h or 1h30m"
_SPAN_UNITS = {"ms": 0.001, "s": 1.0, "": 1.0, "m": 60.0, "h": 3600.0}


def parse_seconds(raw: object) -> float:
    """Seconds (float, zero or more) from a number or `500ms`, `90s`, `15m`, `1h30m`."""
    if isinstance(raw, bool):
        raise ValueError(SECONDS_HELP)
    if isinstance(raw, int | float):
        if raw < 0 or raw != raw:  # negative or NaN
            raise ValueError(SECONDS_HELP)
        return float(raw)
    text = str(raw).strip().replace(" ", "")
    parts = list(_SPAN.finditer(text))
    if not text or not parts or "".join(p.group(0) for p in parts) != text:
        raise ValueError(SECONDS_HELP)
    if len(parts) > 1 and any(not p.group(2) for p in parts):
        raise ValueError(SECONDS_HELP)
    seconds = sum(float(p.group(1)) * _SPAN_UNITS[p.group(2) or ""] for p in parts)
    if seconds > MAX_DURATION:
        raise ValueError(SECONDS_HELP)
    return seconds


def format_seconds(seconds: float) -> str:
    """A duration as a user writes it: `15m`, `90s`, `1h`, `1.5s`, `500ms`."""
    if seconds and seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"
