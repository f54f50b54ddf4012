"""Weak API keys at the command line (issue 22): one line, exit 2, never the key; accepted
with the global --allow-weak-key or COMPOSER_ALLOW_WEAK_KEY=1. And an env file's malformed
VLLM_API_KEY line is quoted without its value."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from .conftest import invoke

WEAK = "changeme-changeme"


@pytest.fixture(autouse=True)
def no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COMPOSER_ALLOW_WEAK_KEY", raising=False)


def _one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("compose-spec: error: "), stderr
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [["up", "mtp"], ["use", "chat-1"], ["bench", "--variants", "baseline"], ["up", "--recreate-gateway"]],
)
def test_weak_key_is_refused_in_one_line_with_exit_2(empty_env_file: Path, no_docker: None, args) -> None:
    result = invoke("--env-file", str(empty_env_file), *args, env={"VLLM_API_KEY": WEAK})
    assert result.exit_code == 2, result.output
    line = _one_error_line(result.stderr)
    assert "VLLM_API_KEY is too easy to guess" in line and "--allow-weak-key" in line
    assert WEAK not in result.output and "changeme" not in result.output


@pytest.mark.parametrize(
    ("before", "after", "env"),
    [
        (["--allow-weak-key"], [], {}),
        ([], [], {"COMPOSER_ALLOW_WEAK_KEY": "1"}),
        ([], ["--allow-weak-key"], {}),  # up's own flag, as before
    ],
)
def test_the_override_lets_a_weak_key_through(
    empty_env_file: Path, no_docker: None, before: list[str], after: list[str], env: dict[str, str]
) -> None:
    """Past the key check, `up` goes on to the engine, which does not exist here (exit 1)."""
    result = invoke(
        "--env-file", str(empty_env_file), *before, "up", "mtp", *after, env={"VLLM_API_KEY": WEAK, **env}
    )
    assert result.exit_code == 1, result.output
    assert "too easy to guess" not in result.output and "Docker" in result.stderr
    assert WEAK not in result.output


def test_a_strong_key_passes_without_the_override(empty_env_file: Path, no_docker: None) -> None:
    result = invoke(
        "--env-file", str(empty_env_file), "up", "mtp", env={"VLLM_API_KEY": secrets.token_urlsafe(32)}
    )
    assert result.exit_code == 1 and "too easy to guess" not in result.output


def test_a_bad_override_value_is_a_usage_error(empty_env_file: Path, no_docker: None) -> None:
    result = invoke(
        "--env-file",
        str(empty_env_file),
        "up",
        "mtp",
        env={"VLLM_API_KEY": WEAK, "COMPOSER_ALLOW_WEAK_KEY": "maybe"},
    )
    assert result.exit_code == 2 and "'--allow-weak-key': 'maybe' is not a valid boolean" in result.output


def test_up_needs_a_variant_unless_it_recreates_the_gateway(empty_env_file: Path, no_docker: None) -> None:
    result = invoke("--env-file", str(empty_env_file), "up", env={"VLLM_API_KEY": secrets.token_urlsafe(32)})
    assert result.exit_code == 2
    assert "up needs a VARIANT: one of baseline, mtp, dflash2" in _one_error_line(result.stderr)
    kube = invoke(
        "--env-file", str(empty_env_file), "up", "--recreate-gateway", "--target", "kubernetes",
        env={"VLLM_API_KEY": secrets.token_urlsafe(32)},
    )  # fmt: skip
    assert kube.exit_code == 2 and "compose target" in kube.stderr


# -- an env file's malformed key line ----------------------------------------------------------
KEY = "sk-" + "Jr4uW3dfZ7SWrbnsSTPMvSct"


@pytest.mark.parametrize(
    "line",
    [
        f'VLLM_API_KEY="{KEY}\n',  # unterminated quote
        f"export VLLM_API_KEY='{KEY}\n",
        f"VLLM_API_KEY {KEY}\n",  # a space instead of '='
        f'VLLM_API_KEY="{KEY}" trailing\n',
        f'HF_TOKEN="{KEY}\n',  # any variable named like a secret
    ],
)
def test_a_malformed_key_line_is_quoted_without_its_value(tmp_path: Path, line: str) -> None:
    env_file = tmp_path / "bad.env"
    env_file.write_text("VLLM_PORT=8001\n" + line)
    for args in (["config"], ["render", "--out", str(tmp_path / "out")]):
        result = invoke("--env-file", str(env_file), *args, env={})
        assert result.exit_code == 2, result.output
        error = _one_error_line(result.stderr)
        assert "bad.env:2: cannot parse" in error and "=... (the value is not shown)" in error
        assert KEY[:6] not in result.output and "sk-" not in result.output


def test_a_key_pasted_without_a_name_is_not_quoted(tmp_path: Path) -> None:
    env_file = tmp_path / "bad.env"
    env_file.write_text(f"VLLM_PORT=8001\n{KEY}\n")
    result = invoke("--env-file", str(env_file), "config", env={})
    assert result.exit_code == 2
    error = _one_error_line(result.stderr)
    assert "bad.env:2: a word of 27 characters (not shown: it may be a secret) has no '='" in error
    assert KEY[:6] not in result.output


def test_other_malformed_lines_are_still_quoted(tmp_path: Path) -> None:
    env_file = tmp_path / "bad.env"
    env_file.write_text('MODEL_DIR="/models/unterminated\n')
    result = invoke("--env-file", str(env_file), "config", env={})
    assert result.exit_code == 2 and "cannot parse 'MODEL_DIR=\"/models/unterminated'" in result.stderr
