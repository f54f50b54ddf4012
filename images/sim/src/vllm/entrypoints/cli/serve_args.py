"""The ``vllm serve`` argument parser (the subset of vLLM's flags the simulator models)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from typing import Any

from vllm.sim.sizes import human_readable_int, max_model_len

DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
ATTENTION_BACKENDS = (
    "FLASH_ATTN",
    "TRITON_ATTN",
    "FLASHINFER",
    "FLEX_ATTENTION",
    "TREE_ATTN",
    "ROCM_ATTN",
    "ROCM_AITER_FA",
    "TORCH_SDPA",
    "FLASHMLA",
    "FLASH_ATTN_MLA",
    "CUTLASS_MLA",
    "TRITON_MLA",
    "FLASHINFER_MLA",
    "CPU_ATTN",
    "NO_ATTENTION",
)


def _size(value: str) -> int:
    try:
        return human_readable_int(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _max_len(value: str) -> int:
    try:
        return max_model_len(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _backend(value: str) -> str:
    name = value.strip().upper()
    if name not in ATTENTION_BACKENDS:
        allowed = ", ".join(ATTENTION_BACKENDS)
        raise argparse.ArgumentTypeError(f"invalid attention backend {value!r} (choose from {allowed})")
    return name


def _json_object(value: str) -> dict[str, Any]:
    try:
        data = json.loads(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid loads value: {value!r}") from None
    if not isinstance(data, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {value!r}")
    return data


def make_parser() -> argparse.ArgumentParser:
    """Build the parser; ``prog`` is ``vllm serve`` so errors read like vLLM's."""
    parser = argparse.ArgumentParser(
        prog="vllm serve", description="Start the vLLM OpenAI-compatible server (simulated, no GPU)."
    )
    parser.add_argument("model_tag", nargs="?", default=None, help="model path or name")
    parser.add_argument("--model", default=None, help="same as the positional model")
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    parser.add_argument("--max-model-len", type=_max_len, default=None)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    parser.add_argument("--kv-cache-memory-bytes", type=_size, default=None)
    parser.add_argument("--attention-backend", type=_backend, default=None)
    parser.add_argument("--speculative-config", "-sc", type=_json_object, default=None)
    parser.add_argument("--enable-sleep-mode", action="store_true")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--max-num-batched-tokens", type=_size, default=None)
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--reasoning-parser", default=None)
    parser.add_argument("--uvicorn-log-level", default="info")
    parser.add_argument("--disable-access-log-for-endpoints", default=None)
    parser.add_argument("--disable-log-requests", action="store_true")
    return parser


def _normalise(argv: Sequence[str]) -> list[str]:
    """vLLM accepts ``--max_model_len`` as ``--max-model-len``."""
    out = []
    for arg in argv:
        if arg.startswith("--") and "_" in arg.split("=", 1)[0]:
            key, sep, value = arg.partition("=")
            arg = key.replace("_", "-") + sep + value
        out.append(arg)
    return out


MODEL_NOT_FIRST = (
    "ValueError: `model` should be provided as the first positional argument when using "
    "`vllm serve`. i.e. `vllm serve <model> --<arg> <value>`."
)
MODEL_OPTION_WARNING = (
    "With `vllm serve`, you should provide the model as a positional argument or in a config "
    "file instead of via the `--model` option. The `--model` option will be removed in a future version."
)


class ModelNotFirstError(ValueError):
    """`vllm serve` got a flag before the model (and --served-model-name): vLLM refuses it."""


def model_first(argv: Sequence[str]) -> list[str]:
    """vLLM's rule before parsing `vllm serve` arguments (utils/argparse_utils.py).

    `--model X` (or `--model=X`) moves to the front, with a warning; then, when the first
    argument is still a flag, `--served-model-name` is present and `--config` is not, vLLM
    raises ModelNotFirstError (its ValueError): the model must come first.
    """
    args = list(argv)
    index = next((i for i, arg in enumerate(args) if re.match(r"^--model(=.+|$)", arg)), None)
    if index is not None:
        from vllm.sim.logs import VllmLog

        VllmLog("APIServer").warning("argparse_utils.py:292", MODEL_OPTION_WARNING)
        if args[index] == "--model" and index + 1 < len(args):
            tag, rest = args[index + 1], index + 2
        else:
            tag, rest = args[index].removeprefix("--model="), index + 1
        args = [tag, *args[:index], *args[rest:]]
    if (
        args
        and args[0].startswith("-")
        and not any(re.match(r"^--config(=.+|$)", arg) for arg in args)
        and any(re.match(r"^--served[-_]model[-_]name(=.+|$)", arg) for arg in args)
    ):
        raise ModelNotFirstError(MODEL_NOT_FIRST)
    return args


def parse_serve_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``vllm serve`` arguments; exits 2 on unknown flags like vLLM does.

    vLLM's top-level parser reports unknown flags, so the message names the program
    ``vllm`` (not ``vllm serve``) after the top-level usage; a bad value for a known flag
    is still reported by the ``vllm serve`` parser.
    """
    parser = make_parser()
    args, unknown = parser.parse_known_args(_normalise(model_first(argv)))
    if unknown:
        from vllm.entrypoints.cli.main import USAGE

        print(USAGE, file=sys.stderr)
        print(f"vllm: error: unrecognized arguments: {' '.join(unknown)}", file=sys.stderr)
        raise SystemExit(2)
    args.model = args.model_tag or args.model or DEFAULT_MODEL
    if args.tensor_parallel_size < 1:
        parser.error("argument --tensor-parallel-size/-tp: must be >= 1")
    if not 0 < args.gpu_memory_utilization <= 1:
        parser.error("argument --gpu-memory-utilization: must be in (0, 1]")
    return args
