"""docker compose habits: global options after the command, `logs SERVICE`, `logs -n`,
`-p`, `-f`, durations with units, and completion of file names and recipes."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from composer.cli import main
from composer.stack.values import format_seconds, parse_seconds
from tests.conftest import shipped_variants

from .conftest import REPO, invoke

# The fewest arguments each command needs to get as far as reading the stack.
MINIMAL_ARGS = {
    "render": [],
    "config": [],
    "up": ["mtp"],
    "use": ["chat"],
    "follow": [],
    "down": [],
    "restart": [],
    "status": [],
    "ps": [],
    "ls": [],
    "variants": [],
    "logs": [],
    "build": ["dflash2", "--dry-run"],
    "doctor": [],
    "bench": [],
    "recommend": [],
    "history": [],
    "version": [],
}


def test_every_command_is_covered() -> None:
    assert set(main.commands) == {*MINIMAL_ARGS, "init"}


@pytest.mark.parametrize("name", sorted(MINIMAL_ARGS))
def test_a_global_option_after_the_command_is_used(name: str, tmp_path: Path, no_docker: None) -> None:
    missing = tmp_path / "missing.env"
    after = invoke(name, *MINIMAL_ARGS[name], "--env-file", str(missing))
    assert after.exit_code == 2, after.output
    assert after.stderr.splitlines() == [
        f"compose-spec: error: env file {str(missing)!r} does not exist: give an existing file"
    ]
    before = invoke("--env-file", str(missing), name, *MINIMAL_ARGS[name])
    assert before.stderr == after.stderr


def test_init_accepts_the_global_options_after_it(tmp_path: Path) -> None:
    result = invoke("init", str(tmp_path / "s"), "-p", "demo", "--env-file", str(tmp_path / "x.env"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "s" / "composer.toml").is_file()


def test_project_name_and_stack_short_options_anywhere(empty_env_file: Path) -> None:
    demo = REPO / "images" / "sim" / "demo.toml"
    before = invoke(
        "-f",
        "composer.toml",
        "-f",
        str(demo),
        "-p",
        "mine",
        "config",
        "--json",
        "--env-file",
        str(empty_env_file),
    )
    after = invoke(
        "config",
        "--json",
        "-f",
        "composer.toml",
        "--stack",
        str(demo),
        "--project-name",
        "mine",
        "--env-file",
        str(empty_env_file),
    )
    assert before.exit_code == after.exit_code == 0, before.output + after.output
    assert before.stdout == after.stdout
    assert '"project": "mine"' in after.stdout and '"stack.project": "flag -p"' in after.stdout
    assert '"dflash2-wsl-no-pin"' in after.stdout  # the second -f file was merged


def test_logs_keeps_dash_f_for_follow() -> None:
    logs = main.commands["logs"]
    follow = next(p for p in logs.params if p.name == "follow")
    stack = next(p for p in logs.params if p.name == "stacks")
    assert "-f" in follow.opts and "-f" not in stack.opts and "--stack" in stack.opts


def test_logs_takes_n() -> None:
    result = invoke("logs", "-n", "many")
    assert result.exit_code == 2 and "'many': expected a number of lines" in result.stderr


def test_logs_names_the_services_it_knows(empty_env_file: Path, no_docker: None) -> None:
    result = invoke("logs", "gatway", "--env-file", str(empty_env_file))
    assert result.exit_code == 2
    assert "unknown service 'gatway': did you mean 'gateway'?" in result.stderr
    services = sorted([*shipped_variants(), "gateway"])
    assert "choose one of " + ", ".join(services) in result.stderr


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        ("900", 900.0),
        ("1.5", 1.5),
        ("90s", 90.0),
        ("15m", 900.0),
        ("1h30m", 5400.0),
        ("500ms", 0.5),
        (2, 2.0),
    ],
)
def test_durations_take_units(raw: object, seconds: float) -> None:
    assert parse_seconds(raw) == seconds


@pytest.mark.parametrize("raw", ["", "15x", "-1", "m", "1h30", "1.5.2s", True])
def test_bad_durations_are_refused(raw: object) -> None:
    with pytest.raises(ValueError, match="a duration such as"):
        parse_seconds(raw)


def test_durations_are_shown_in_units() -> None:
    assert [format_seconds(s) for s in (900, 90, 3600, 1.5, 0.25)] == ["15m", "90s", "1h", "1.5s", "250ms"]


@pytest.mark.parametrize(
    "args",
    [["up", "mtp", "--timeout", "15q"], ["status", "--interval", "soon"], ["follow", "--settle", "-1"]],
)
def test_a_bad_duration_option_is_a_usage_error(args: list[str]) -> None:
    result = invoke(*args)
    assert result.exit_code == 2 and "expected a duration such as" in result.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "1e400", "169h", "-0"])
@pytest.mark.parametrize(
    "option", [["up", "mtp", "--timeout"], ["follow", "--settle"], ["bench", "--timeout"]]
)
def test_a_duration_option_is_positive_finite_and_bounded(option: list[str], value: str) -> None:
    result = invoke(*option, value)
    assert result.exit_code == 2, result.output
    assert "more than 0 and at most 168h (7 days)" in result.stderr
    assert "Traceback" not in result.output and "OverflowError" not in result.output


def test_a_week_is_the_longest_duration_option() -> None:
    from composer.cli.params import Duration

    assert Duration().convert("168h", None, None) == 7 * 24 * 3600
    assert Duration().convert("0.5", None, None) == 0.5


def test_help_shows_durations_with_units() -> None:
    assert "[default: 15m]" in invoke("up", "--help").stdout
    assert "[default: 2s]" in invoke("status", "--help").stdout


def _complete_raw(words: list[str], env_file: Path) -> list[str]:
    result = CliRunner().invoke(
        main,
        [],
        env={
            "_COMPOSE_SPEC_COMPLETE": "bash_complete",
            "COMP_WORDS": " ".join(["compose-spec", *words, ""]),
            "COMP_CWORD": str(len(words) + 1),
            "COMPOSER_STACK": "",
        },
        prog_name="compose-spec",
    )
    return result.stdout.splitlines()


@pytest.mark.parametrize(
    "words",
    [["--env-file"], ["up", "mtp", "--env-file"], ["-f"], ["config", "--stack"], ["bench", "--prompt-file"]],
)
def test_path_options_complete_file_names(words: list[str], empty_env_file: Path) -> None:
    assert _complete_raw(words, empty_env_file) == ["file,"]


def test_build_completes_recipes(empty_env_file: Path) -> None:
    offered = [line.split(",", 1)[1] for line in _complete_raw(["build"], empty_env_file)]
    assert offered == sorted(p.parent.name for p in (REPO / "images").glob("*/image.toml"))
    assert "dflash2" in offered


def test_variant_completion_reads_a_stack_given_after_the_command(empty_env_file: Path) -> None:
    demo = str(REPO / "images" / "sim" / "demo.toml")
    words = ["--env-file", str(empty_env_file), "up", "-f", "composer.toml", "-f", demo]
    offered = [line.split(",", 1)[1] for line in _complete_raw(words, empty_env_file)]
    assert "dflash2-wsl-no-pin" in offered
