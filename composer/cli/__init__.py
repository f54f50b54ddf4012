"""The `compose-spec` command line: one module per command or family of commands.

Owns: parsing the command line (click), the global options wherever they stand (`globals`),
printing, the one error handler (one line on stderr; exit 2 for usage and configuration
errors, 1 for failures, 130 when interrupted) and the one stop-signal handler (`base`), one
Docker client per command (`context`). The only part of the package that imports click or
prints; commands call domain code and print what it returns.
May import: every other part of `composer`. Nothing imports it.
Public: `main` (the `compose-spec` group), `ComposeSpecGroup`, `LiveLine`.
"""

from composer.cli.app import main
from composer.cli.base import ComposeSpecGroup
from composer.cli.output import LiveLine

__all__ = ["ComposeSpecGroup", "LiveLine", "main"]
