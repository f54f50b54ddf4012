"""`python -m composer`: the same command line as `compose-spec`."""

from composer.cli import main

main(prog_name="compose-spec")
