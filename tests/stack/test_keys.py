"""The API key's entropy estimate: weak keys refused (under 64 bits), generated keys pass,
and no message ever quotes the key (issue 22)."""

from __future__ import annotations

import secrets

import pytest

from composer.errors import ConfigError
from composer.stack.keys import (
    ESTIMATE_CHARS,
    MIN_KEY_BITS,
    estimate_key,
    is_secret_name,
    require_strong_key,
    weak_key_message,
)
from composer.stack.starter import generated_key

WEAK = [
    "aaaaaaaaaaaaaaaaaaaa",  # repeated
    "0000000000000000",
    "changeme-changeme",  # a dictionary word, twice
    "abcdefghijklmnop",  # sequential
    "1234567890123456",
    "sk-1234567890abcdefghijklmnopqrstuvwxyz",  # long, but two sequences
    "Password2024!Password2024!",  # word + year, repeated
    "correcthorsebatterystaple",  # four common words
    "qwertyuiopasdfghjkl",  # keyboard rows
    "summer2024summer2024",
    "a" * 200,  # longer than zxcvbn reads
    "Zq9Zq9Zq9Zq9Zq9",
    "sk-123456",
    "k",
]


@pytest.mark.parametrize("key", WEAK)
def test_weak_keys_are_estimated_under_64_bits(key: str) -> None:
    strength = estimate_key(key)
    assert strength.weak and strength.bits < MIN_KEY_BITS, strength


@pytest.mark.parametrize("make", [lambda: secrets.token_urlsafe(32), generated_key])
def test_generated_keys_are_strong(make) -> None:
    """The demo's key (token_urlsafe(32)) and `init --env`'s (sk- + 48 hex digits)."""
    for _ in range(20):
        key = make()
        assert not estimate_key(key).weak, key


def test_random_keys_pass_from_twenty_characters() -> None:
    """zxcvbn counts a random character as about 3.3 bits: 20 of them reach 64."""
    assert not estimate_key(secrets.token_urlsafe(16)).weak  # 22 characters
    assert estimate_key(secrets.token_hex(7)).weak  # 14 characters


def test_a_long_key_is_judged_by_its_first_characters() -> None:
    strong = secrets.token_urlsafe(96)
    assert len(strong) > ESTIMATE_CHARS and not estimate_key(strong).weak
    assert estimate_key("x" * ESTIMATE_CHARS + secrets.token_urlsafe(32)).weak


def test_the_reasons_name_patterns_never_the_key() -> None:
    assert "repeated characters" in estimate_key("aaaaaaaaaaaaaaaaaaaa").reasons
    assert "a sequence of characters" in estimate_key("abcdefghijklmnop").reasons
    assert "a common word or password" in estimate_key("changeme-changeme").reasons
    assert "only 5 characters" in estimate_key("Zq9x!").describe()


@pytest.mark.parametrize("key", ["changeme-changeme", "0000000000000000", "sk-123456"])
def test_require_strong_key_refuses_in_one_line_without_the_key(key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        require_strong_key(key)
    message = str(caught.value)
    assert caught.value.exit_code == 2 and "\n" not in message
    assert key not in message and "too easy to guess" in message
    assert "--allow-weak-key" in message and "COMPOSER_ALLOW_WEAK_KEY=1" in message
    assert "token_urlsafe(32)" in message


def test_require_strong_key_allows_weak_on_request_and_strong_always() -> None:
    assert require_strong_key("0000000000000000", allow_weak=True).weak  # type: ignore[union-attr]
    assert not require_strong_key(secrets.token_urlsafe(32)).weak  # type: ignore[union-attr]
    assert require_strong_key(None) is None and require_strong_key("") is None


def test_message_states_the_estimate_and_the_minimum() -> None:
    message = weak_key_message(estimate_key("abcdefghijklmnop"))
    assert "about 6 bits" in message and f"at least {MIN_KEY_BITS} bits" in message


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("VLLM_API_KEY", True),
        ("HF_TOKEN", True),
        ("DB_PASSWORD", True),
        ("MODEL_DIR", False),
        ("VLLM_PORT", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret
