"""`follow --print-systemd-unit`: a unit systemd reads back to the same command, with paths
holding spaces and `%`; and `follow` ends with 130 when interrupted."""

from __future__ import annotations

import configparser
import importlib
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from composer.cli import main
from composer.render.systemd import FollowUnit, quote_word, render_follow_unit

from .conftest import REPO

KEY = "VLLM_API_KEY=Zq8xT3vLp0Wm7Rk2Yb5Nc9Hd4Gf6Js1A\n"


def _unit_sections(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    return parser


def _systemd_words(line: str) -> list[str]:
    """ExecStart= split as systemd does for what `quote_word` writes: quotes with C escapes,
    then `$$` and `%%` back to one character."""
    return [w.replace("$$", "$").replace("%%", "%") for w in shlex.split(line, posix=True)]


@pytest.fixture
def odd_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder whose path has a space and a `%`, holding a stack and an env file."""
    folder = tmp_path / "my stacks" / "50% off"
    folder.mkdir(parents=True)
    shutil.copy(REPO / "composer.toml", folder / "composer.toml")
    (folder / "my env").write_text(KEY)
    monkeypatch.chdir(folder)
    for name in ("COMPOSER_STACK", "DOCKER_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/docker $x.sock")
    return folder


def _print_unit(*extra: str) -> str:
    result = CliRunner().invoke(
        main,
        [
            "--env-file",
            "my env",
            "--set",
            "gateway.switch_on_model=true",
            "follow",
            "--print-systemd-unit",
            "--timeout",
            "20m",
            *extra,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_unit_parses_and_runs_the_same_follow(odd_dir: Path) -> None:
    unit = _unit_sections(_print_unit())
    service = unit["Service"]
    assert service["Restart"] == "on-failure"
    assert service["WorkingDirectory"].replace("%%", "%") == str(odd_dir)
    assert "SuccessExitStatus" in service and "130" in service["SuccessExitStatus"].split()
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    words = _systemd_words(service["ExecStart"])
    assert Path(words[0]).is_absolute() and Path(words[0]).exists()
    assert words[words.index("--env-file") + 1] == str(odd_dir / "my env")
    assert words[words.index("--stack") + 1] == str(odd_dir / "composer.toml")
    assert words[words.index("--set") + 1] == "gateway.switch_on_model=true"
    assert words[words.index("follow") :] == ["follow", "--timeout", "20m", "--settle", "1s"]
    assert "--print-systemd-unit" not in words
    env = _systemd_words(service["Environment"])
    assert env == ["DOCKER_HOST=unix:///run/docker $x.sock"]
    assert "Zq8xT3vLp0Wm7Rk2Yb5Nc9Hd4Gf6Js1A" not in _print_unit()  # the key stays in the env file


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
def test_systemd_analyze_verifies_the_unit(odd_dir: Path) -> None:
    path = odd_dir / "compose-spec-follow.service"
    path.write_text(_print_unit())
    done = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "compose-spec-follow.service" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("word", "written"),
    [
        ("/usr/bin/compose-spec", "/usr/bin/compose-spec"),
        ("/srv/my stack/.env", '"/srv/my stack/.env"'),
        ('say "hi"\\', '"say \\"hi\\"\\\\"'),
        ("50%", '"50%%"'),
        ("$HOME", '"$$HOME"'),
        (";", '";"'),
        ("", '""'),
    ],
)
def test_words_are_escaped_for_systemd(word: str, written: str) -> None:
    assert quote_word(word) == written
    assert _systemd_words(written) == [word]


def test_a_path_with_a_line_break_is_refused() -> None:
    with pytest.raises(ValueError, match="line break"):
        render_follow_unit(FollowUnit(command=["/bin/true"], working_directory="/a\nb", project="p"))


def test_follow_without_switching_prints_no_unit(odd_dir: Path) -> None:
    result = CliRunner().invoke(main, ["--env-file", "my env", "follow", "--print-systemd-unit"])
    assert result.exit_code == 2 and "follow has nothing to run" in result.stderr


def test_ctrl_c_ends_follow_with_130(odd_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The follower's loop interrupted (Ctrl-C, SIGTERM) -> a stop line, then exit 130."""

    def interrupted(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt

    # the module itself: `composer.swap` also exports a function named follow
    monkeypatch.setattr(importlib.import_module("composer.swap.follow"), "follow", interrupted)
    monkeypatch.setattr("composer.cli.base.Context.docker", lambda self, timeout=None: object())
    result = CliRunner().invoke(
        main, ["--env-file", "my env", "--set", "gateway.switch_on_model=true", "follow"]
    )
    assert result.exit_code == 130, result.output
    assert "stopped by a signal" in result.stdout


def test_a_switch_interrupted_and_rolled_back_ends_follow_with_130(
    odd_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal during a switch rolls it back inside `up` (no KeyboardInterrupt reaches the
    loop): the follower sets its stop event, and follow still exits 130, not 0."""

    def rolled_back(*args: object, stop, **kwargs: object) -> int:
        stop.set()
        return 0

    # the module itself: `composer.swap` also exports a function named follow
    monkeypatch.setattr(importlib.import_module("composer.swap.follow"), "follow", rolled_back)
    monkeypatch.setattr("composer.cli.base.Context.docker", lambda self, timeout=None: object())
    result = CliRunner().invoke(
        main, ["--env-file", "my env", "--set", "gateway.switch_on_model=true", "follow"]
    )
    assert result.exit_code == 130, result.output
    assert "stopped by a signal" in result.stdout and "switches run" not in result.stdout
