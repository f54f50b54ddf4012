"""Run inside the vllm-cpu image: what real vLLM makes of the rendered adaptive configs.

Reads a JSON list of {"name", "argv"} on stdin (each variant's rendered `vllm serve`
arguments) and prints one JSON object: per variant, the speculative config vLLM's own
argument parser produced, the keys `SpeculativeConfig` does not know, and the dense
batch-size -> K lookup vLLM's scheduler builds from the schedule; then what vLLM's
engine config says on this CPU build for n-gram speculation with the same fields.
"""

import dataclasses
import json
import os
import sys

from vllm.config.speculative import SpeculativeConfig
from vllm.engine.arg_utils import EngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

FIELDS = {f.name for f in dataclasses.fields(SpeculativeConfig)}
MODEL = "/models/qwen3-tiny"


def parse(argv):
    parser = make_arg_parser(FlexibleArgumentParser())
    args = parser.parse_args(["--model", *argv])
    spec = args.speculative_config
    out = {"speculative_config": spec, "unknown_keys": sorted(set(spec) - FIELDS)}
    schedule = spec.get("num_speculative_tokens_per_batch_size")
    if schedule is not None:
        out["lookup"] = build_dynamic_sd_schedule_lookup(schedule, 256, spec["num_speculative_tokens"])[1:]
    return out


def engine(spec, eager, v2):
    os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    if v2:
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    try:
        args = EngineArgs(
            model=MODEL, dtype="float32", max_model_len=2048, enforce_eager=eager, speculative_config=spec
        )
        config = args.create_engine_config().speculative_config
        return {"ok": True, "schedule": config.num_speculative_tokens_per_batch_size}
    except Exception as err:  # vLLM's own error, shown as it would be logged
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        return {"ok": False, "error": type(err).__name__, "lines": lines}


def main():
    result = {"variants": {v["name"]: parse(v["argv"]) for v in json.load(sys.stdin)}}
    ngram = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
    schedule = [[1, 1, 3], [2, 256, 0]]
    result["cpu"] = {
        "dsd": engine({**ngram, "num_speculative_tokens_per_batch_size": schedule}, True, False),
        "adaptive_v2": engine({**ngram, "enable_adaptive_verification": True}, False, True),
        "adaptive_v1": engine({**ngram, "enable_adaptive_verification": True}, True, False),
        "removed": engine({**ngram, "speculative_disable_by_batch_size": 4}, True, False),
    }
    print("RESULT " + json.dumps(result))


main()
