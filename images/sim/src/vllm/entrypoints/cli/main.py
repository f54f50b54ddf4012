"""The ``vllm`` command: only the ``serve`` subcommand is simulated."""

from __future__ import annotations

import sys
from collections.abc import Sequence

SUBCOMMANDS = ("chat", "complete", "serve", "bench", "collect-env", "run-batch")
USAGE = "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ..."


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch ``vllm serve ...``; other subcommands are not simulated."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] in ("-v", "--version"):
        from vllm.version import __version__

        print(__version__)
        return 0
    if args[0] != "serve":
        print(USAGE, file=sys.stderr)
        choices = ", ".join(f"'{c}'" for c in SUBCOMMANDS)
        print(
            f"vllm: error: argument subparser: invalid choice: '{args[0]}' (choose from {choices})",
            file=sys.stderr,
        )
        return 2
    from vllm.entrypoints.cli.serve_args import ModelNotFirstError, parse_serve_args
    from vllm.sim.boot import run
    from vllm.sim.logs import traceback_text

    try:
        parsed = parse_serve_args(args[1:])
    except ModelNotFirstError as err:  # uncaught in vLLM: a bare traceback, exit 1
        frames = [("/usr/local/bin/vllm", 10, "<module>")]
        print(traceback_text(frames, str(err)), file=sys.stderr, flush=True)
        return 1
    return run(parsed)


if __name__ == "__main__":
    raise SystemExit(main())
