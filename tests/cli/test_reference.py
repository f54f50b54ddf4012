"""docs/commands.md is the command line's own help: regenerated, it is the same page."""

from __future__ import annotations

from composer.cli import main
from composer.cli.reference import commands_markdown

from .conftest import REPO


def test_the_committed_page_is_generated_from_the_help() -> None:
    page = (REPO / "docs" / "commands.md").read_text()
    assert page == commands_markdown(), (
        "docs/commands.md is stale: python -m composer.cli.reference > docs/commands.md"
    )


def test_every_command_and_alias_is_on_the_page() -> None:
    page = commands_markdown()
    for name, command in main.commands.items():
        assert f"## compose-spec {command.name}" in page
        assert f"compose-spec {name}" in page
