"""`python3 -m vllm serve ...` is the same as the `vllm` command."""

from vllm.entrypoints.cli.main import main

raise SystemExit(main())
