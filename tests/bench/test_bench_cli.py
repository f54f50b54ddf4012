"""`compose-spec bench` argument handling: usage errors exit 2 before Docker is touched."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from composer.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")  # fail loudly if reached
    return CliRunner()


def invoke(runner: CliRunner, *args: str):
    return runner.invoke(main, ["--env-file", ".env.demo", "bench", *args])


def test_bad_k_is_a_usage_error(runner: CliRunner) -> None:
    result = invoke(runner, "--k", "3,seven")
    assert result.exit_code == 2
    assert "seven" in result.output


def test_prompt_file_and_tokens_together(runner: CliRunner, tmp_path: Path) -> None:
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello")
    result = invoke(runner, "--prompt-file", str(prompts), "--prompt-tokens", "100")
    assert result.exit_code == 2
    assert "not both" in result.output


def test_zero_runs(runner: CliRunner) -> None:
    result = invoke(runner, "--runs", "0")
    assert result.exit_code == 2
    assert "--runs" in result.output


def test_help_lists_the_options(runner: CliRunner) -> None:
    result = runner.invoke(main, ["bench", "--help"])
    assert result.exit_code == 0
    for option in (
        "--variants",
        "--k",
        "--prompt-file",
        "--prompt-tokens",
        "--max-tokens",
        "--runs",
        "--warmup",
    ):
        assert option in result.output
