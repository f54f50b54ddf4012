"""The commands reference (docs/commands.md), generated from the command line's own help:
`python -m composer.cli.reference > docs/commands.md`; a test keeps the committed page equal.
"""

from __future__ import annotations

import click

from composer.cli.base import EXIT_CODES, GLOBALS_NOTE

WIDTH = 100


def commands_markdown() -> str:
    """The page: the global options, then each command's help as `--help` prints it."""
    from composer.cli import main

    root = click.Context(
        main,
        info_name="compose-spec",
        terminal_width=WIDTH,
        max_content_width=WIDTH,
        help_option_names=["-h", "--help"],
    )
    lines = [
        "# Commands",
        "",
        "<!-- Generated from `compose-spec --help` by `python -m composer.cli.reference`; do not edit. -->",
        "",
        "Every command of `compose-spec`, as its `--help` prints it. "
        + GLOBALS_NOTE
        + " For example `compose-spec up mtp --env-file .env` is `compose-spec --env-file .env up mtp`.",
        "",
        f"Exit codes: {EXIT_CODES}.",
        "",
        "Habits from docker compose work: `-f FILE` and `-p NAME` anywhere on the line, `ps` for",
        "the project's containers and ports, `down --volumes`, `logs gateway` or `logs VARIANT`,",
        "`logs -n 20 -f`. Durations take units",
        "(`--timeout 15m`, `--settle 500ms`, `--interval 2s`; a bare number is seconds).",
        "`config` lists every key of the stack with its value as written, its source and what it",
        "does; `config --keys` lists every settable key; `config --schema` prints the JSON Schema",
        "of composer.toml (committed as `schema/composer.schema.json`; a `#:schema` first line lets",
        "Taplo / Even Better TOML validate and complete the file in the editor).",
        "",
        "Shell completion (commands, variants, workloads, recipes, file names):",
        "",
        "```bash",
        'eval "$(_COMPOSE_SPEC_COMPLETE=bash_source compose-spec)"   # zsh: zsh_source, fish: fish_source',
        "```",
        "",
        "## compose-spec",
        "",
        "```text",
        main.get_help(root),
        "```",
    ]
    for name in sorted({c.name or n for n, c in main.commands.items()}):
        command = main.commands[name]
        lines += ["", f"## compose-spec {name}", ""]
        others = [n for n, c in main.commands.items() if c is command and n != name]
        if others:
            lines += ["Also: " + ", ".join(f"`compose-spec {n}`" for n in others) + ".", ""]
        ctx = click.Context(
            command, info_name=name, parent=root, terminal_width=WIDTH, max_content_width=WIDTH
        )
        lines += ["```text", command.get_help(ctx), "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    click.echo(commands_markdown(), nl=False)
