"""Exit codes, `--json` error objects, typo suggestions, help texts and shell completion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from composer.cli import ComposeSpecGroup, main
from tests.conftest import shipped_variants

from .conftest import invoke

JSON_COMMANDS = ("config", "up", "use", "status", "ls", "doctor", "bench")


def error_object(stdout: str) -> dict:
    """Exactly one JSON object on stdout, with the documented keys."""
    data = json.loads(stdout)  # fails on two objects or on extra text
    assert {"error", "kind", "exit_code"} <= set(data)
    return data


def test_missing_api_key_is_a_configuration_error(empty_env_file: Path, no_docker: None) -> None:
    for args in (["up", "mtp"], ["use", "chat-1"], ["bench", "--variants", "baseline"]):
        result = invoke("--env-file", str(empty_env_file), *args)
        assert result.exit_code == 2, result.output
        assert "VLLM_API_KEY is not set" in result.stderr
        assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "kind", "code"),
    [
        (["up", "mtp", "--json"], "config", 2),  # no key
        (["up", "nope", "--json"], "usage", 2),
        (["--set", "stack.port=0", "status", "--json"], "config", 2),
        (["status", "--json", "--bogus"], "usage", 2),
        (["status", "--json"], "docker", 1),  # no engine at DOCKER_HOST
        (["config", "nope", "--json"], "usage", 2),
        (["bench", "--json", "--k", "x"], "usage", 2),
    ],
)
def test_json_failures_print_one_error_object(
    empty_env_file: Path, no_docker: None, args: list[str], kind: str, code: int
) -> None:
    result = invoke("--env-file", str(empty_env_file), *args)
    assert result.exit_code == code, result.output
    data = error_object(result.stdout)
    assert data["kind"] == kind and data["exit_code"] == code and data["error"]


def test_without_json_stdout_stays_empty_on_failure(empty_env_file: Path, no_docker: None) -> None:
    result = invoke("--env-file", str(empty_env_file), "up", "mtp")
    assert result.stdout == "" and result.stderr.startswith("compose-spec: error: ")


def test_interrupt_exits_130_quietly(monkeypatch: pytest.MonkeyPatch, empty_env_file: Path) -> None:
    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("composer.render.describe.stack_data", interrupted)
    plain = invoke("--env-file", str(empty_env_file), "config")
    assert plain.exit_code == 130 and "Aborted" not in plain.output and "Traceback" not in plain.output
    as_json = invoke("--env-file", str(empty_env_file), "config", "--json")
    assert as_json.exit_code == 130
    assert error_object(as_json.stdout) == {"error": "interrupted", "kind": "interrupted", "exit_code": 130}


def test_unexpected_errors_are_one_line(monkeypatch: pytest.MonkeyPatch, empty_env_file: Path) -> None:
    def broken(*_: object, **__: object) -> None:
        raise TypeError("boom")

    monkeypatch.setattr("composer.render.describe.stack_data", broken)
    result = invoke("--env-file", str(empty_env_file), "config", "--json")
    assert result.exit_code == 1
    assert error_object(result.stdout)["kind"] == "internal"
    assert result.stderr.splitlines() == [
        "compose-spec: error: internal error: boom (a bug: set COMPOSE_SPEC_DEBUG=1 to see the traceback, and report it)"
    ]


def test_every_json_command_is_known_to_the_handler() -> None:
    group = main
    assert isinstance(group, ComposeSpecGroup)
    supported = {name for name, cmd in group.commands.items() if any(p.name == "as_json" for p in cmd.params)}
    assert set(JSON_COMMANDS) <= supported
    assert group.wants_json(["--stack", "a.toml", "--set", "x=--json", "status", "--json"])
    assert not group.wants_json(["render", "--json"])  # render has no --json


@pytest.mark.parametrize(
    ("args", "suggestion"),
    [
        (["up", "mpt"], "did you mean 'mtp'?"),
        (["use", "chta-1"], "did you mean 'chat-1'?"),
        (["config", "dflash"], "did you mean 'dflash2'?"),
        (["stauts"], "did you mean 'status'?"),
        (["build", "dflsh2"], "did you mean 'dflash2'?"),
    ],
)
def test_typos_get_the_close_match(
    empty_env_file: Path, no_docker: None, args: list[str], suggestion: str
) -> None:
    result = invoke("--env-file", str(empty_env_file), *args)
    assert result.exit_code == 2, result.output
    assert suggestion in result.stderr


def test_no_suggestion_for_a_far_name(empty_env_file: Path) -> None:
    result = invoke("--env-file", str(empty_env_file), "config", "zzzzzz")
    assert result.exit_code == 2 and "did you mean" not in result.stderr


def test_every_command_help_shows_examples_and_exit_codes() -> None:
    names = sorted(main.commands)
    assert {"render", "up", "status", "logs", "ls", "variants", "bench", "doctor"} <= set(names)
    for name in [None, *names]:
        result = invoke(*([name] if name else []), "--help")
        assert result.exit_code == 0
        assert "Examples:" in result.stdout and "compose-spec " in result.stdout, name
        if name:
            assert "Exit codes: 0 success, 1 failure, 2 usage or configuration error, 130" in result.stdout


def complete(words: str, env_file: Path) -> list[str]:
    """What bash completion offers for the last word of `words` (click's protocol)."""
    parts = words.split()
    result = CliRunner().invoke(
        main,
        [],
        env={
            "_COMPOSE_SPEC_COMPLETE": "bash_complete",
            "COMP_WORDS": " ".join(["compose-spec", "--env-file", str(env_file), *parts]),
            "COMP_CWORD": str(len(parts) + (3 if words.endswith(" ") else 2)),
        },
        prog_name="compose-spec",
    )
    return [line.split(",", 1)[1] for line in result.stdout.splitlines()]


def test_shell_completion_of_commands_variants_and_workloads(empty_env_file: Path) -> None:
    assert "status" in complete("sta", empty_env_file)
    variants = sorted(shipped_variants())
    assert complete("up m", empty_env_file) == [v for v in variants if v.startswith("m")]
    assert complete("up ", empty_env_file) == variants
    assert complete("use ", empty_env_file) == ["chat-1", "long-16"]
    assert complete("doctor d", empty_env_file) == [v for v in variants if v.startswith("d")]
