"""How hard VLLM_API_KEY is to guess: zxcvbn's entropy estimate, and the refusal of weak keys.

log2 of the fewest guesses an attacker needs who tries repeats, sequences, keyboard walks,
dates and dictionaries first; about 3.3 bits per random character, so a random key needs 20
or more to reach `MIN_KEY_BITS`. No message here ever quotes the key.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

from composer.errors import ConfigError

MIN_KEY_BITS = 64  # keys estimated below this many bits are refused unless weak keys are allowed
ESTIMATE_CHARS = 72  # zxcvbn's own input limit
ALLOW_WEAK_VAR = "COMPOSER_ALLOW_WEAK_KEY"
GENERATE_HELP = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
ALLOW_HELP = f"--allow-weak-key (or {ALLOW_WEAK_VAR}=1)"

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW(?:OR)?D|CREDENTIAL", re.IGNORECASE)


def key_fingerprint(key: str | None) -> str:
    """A short one-way tag of the key (`-` without one), never revealing it."""
    if not key:
        return "-"
    return hashlib.sha256(b"vllm-composer key fingerprint\0" + key.encode()).hexdigest()[:12]


def is_secret_name(name: str) -> bool:
    """True for VLLM_API_KEY and variables named like secrets (KEY, TOKEN, SECRET, PASSWORD)."""
    return bool(_SECRET_NAME.search(name))


# zxcvbn's pattern names, as the reasons a user can act on (never the matched text).
_REASONS = {
    "repeat": "repeated characters",
    "sequence": "a sequence of characters",
    "dictionary": "a common word or password",
    "spatial": "a keyboard pattern",
    "date": "a date",
    "regex": "a year",
}


@dataclass(frozen=True)
class KeyStrength:
    """The estimate: bits of entropy and what made it low (pattern kinds, never the key)."""

    bits: float
    length: int
    reasons: tuple[str, ...] = ()

    @property
    def weak(self) -> bool:
        return self.bits < MIN_KEY_BITS

    def describe(self) -> str:
        """`about 27 bits (repeated characters, a common word or password)`."""
        found = list(self.reasons)
        if not found and self.length < 20:
            found.append(f"only {self.length} characters")
        return f"about {math.floor(self.bits)} bits" + (f" ({', '.join(found)})" if found else "")


def estimate_key(key: str) -> KeyStrength:
    """The estimated entropy of `key` in bits, with the guessable patterns found in it."""
    from zxcvbn import zxcvbn

    if not key:
        return KeyStrength(0.0, 0)
    result = zxcvbn(key[:ESTIMATE_CHARS])
    bits = math.log2(max(float(result["guesses"]), 1.0))
    kinds = dict.fromkeys(m["pattern"] for m in result["sequence"])
    reasons = tuple(_REASONS[k] for k in kinds if k in _REASONS)
    return KeyStrength(bits, len(key), reasons)


def weak_key_message(strength: KeyStrength) -> str:
    """One line saying why a key is refused, how to make one and how to accept it anyway."""
    return (
        f"VLLM_API_KEY is too easy to guess: its estimated entropy is {strength.describe()}, "
        f"at least {MIN_KEY_BITS} bits are required: generate one with {GENERATE_HELP}, "
        f"or pass {ALLOW_HELP} to accept it"
    )


def require_strong_key(key: str | None, allow_weak: bool = False) -> KeyStrength | None:
    """Raise ConfigError (exit 2) when `key` is weak and not allowed; the estimate (None without a key)."""
    if not key:
        return None
    strength = estimate_key(key)
    if strength.weak and not allow_weak:
        raise ConfigError(weak_key_message(strength))
    return strength
