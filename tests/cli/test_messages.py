"""User-facing messages: no Python reprs or exception names, and fixes a pip user can run."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer.engine.client import unreachable_reason

from .conftest import invoke


def test_an_unreachable_engine_is_said_in_words(empty_env_file: Path, no_docker: None) -> None:
    result = invoke("status", "--env-file", str(empty_env_file))
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert "its socket does not exist (is the engine running?)" in line
    for leak in ("FileNotFoundError", "Connection aborted", "('", "Error while fetching"):
        assert leak not in line


def test_reasons_come_from_the_cause_chain() -> None:
    try:
        try:
            raise PermissionError(13, "denied")
        except PermissionError as inner:
            raise RuntimeError(("Connection aborted.", inner)) from inner
    except RuntimeError as err:
        assert "permission denied on its socket" in unreachable_reason(err)


def test_an_empty_recipe_folder_says_what_a_recipe_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "none.env").write_text("")
    result = invoke(
        "build",
        "dflash2",
        "--env-file",
        str(tmp_path / "none.env"),
        "-f",
        str(Path(__file__).parents[2] / "composer.toml"),
    )
    assert result.exit_code == 2
    assert "choose one of none" not in result.stderr and "no image recipes" in result.stderr


@pytest.mark.parametrize("key", ["\\r", "a\\nb", "\\u2028"])
def test_a_configuration_error_quoting_a_line_break_is_still_one_line(tmp_path: Path, key: str) -> None:
    stack = (Path(__file__).parents[2] / "composer.toml").read_text()
    (tmp_path / "c.toml").write_text(stack.replace("[images]\n", f'[images]\n"{key}" = ""\n', 1))
    (tmp_path / "e.env").write_text("")
    result = invoke("config", "--env-file", str(tmp_path / "e.env"), "-f", str(tmp_path / "c.toml"))
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1 and "invalid image name" in result.stderr
