"""Older images' entry point: ``python3 -m vllm.entrypoints.openai.api_server --model M ...``."""

from __future__ import annotations

import sys

from vllm.entrypoints.cli.serve_args import parse_serve_args
from vllm.sim.boot import run

if __name__ == "__main__":
    raise SystemExit(run(parse_serve_args(sys.argv[1:])))
