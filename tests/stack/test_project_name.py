"""The compose project defaults to the stack file's folder name, sanitised as compose does."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer.errors import ConfigError
from composer.stack.load import compose_project_name, load_stack
from composer.stack.source import StackSource

MINIMAL = '[images]\nvllm = "img"\n[variants.baseline]\n'


def _stack_in(folder: Path, text: str = MINIMAL) -> Path:
    folder.mkdir(parents=True)
    (folder / "composer.toml").write_text(text)
    (folder / "empty.env").write_text("")
    return folder / "composer.toml"


@pytest.mark.parametrize(
    ("folder", "expected"),
    [
        ("My.Demo_1", "mydemo_1"),
        ("--x y", "xy"),
        ("_Stack-B", "stack-b"),
        ("ünï", "n"),
        ("__", ""),
        (".", ""),
    ],
)
def test_compose_project_name_is_composes_sanitising(folder: str, expected: str) -> None:
    assert compose_project_name(folder) == expected


def test_a_stack_without_a_project_is_named_after_its_folder(tmp_path: Path) -> None:
    path = _stack_in(tmp_path / "Team.Chat-2")
    stack = load_stack([path], path.parent / "empty.env", environ={})
    assert stack.project == "teamchat-2"
    assert stack.sources["stack.project"] == "default (the stack file's folder)"


def test_the_project_keeps_its_precedence_over_the_folder_name(tmp_path: Path) -> None:
    path = _stack_in(tmp_path / "folder")
    env = path.parent / "empty.env"
    assert load_stack([path], env, environ={"COMPOSE_PROJECT_NAME": "fromenv"}).project == "fromenv"
    source = StackSource((str(path),), str(env), project_name="fromflag")
    assert source.load().project == "fromflag"
    named = _stack_in(tmp_path / "other", '[stack]\nproject = "named"\n' + MINIMAL)
    assert load_stack([named], env, environ={}).project == "named"


def test_a_folder_with_no_usable_name_is_refused_unless_a_project_is_given(tmp_path: Path) -> None:
    path = _stack_in(tmp_path / "__")
    env = path.parent / "empty.env"
    with pytest.raises(ConfigError, match=r"folder '__' gives no compose project name.*pass -p NAME"):
        load_stack([path], env, environ={})
    assert load_stack([path], env, environ={}, flags=["stack.project=given"]).project == "given"
