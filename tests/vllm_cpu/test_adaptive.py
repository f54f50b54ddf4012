"""The adaptive speculation variants against real vLLM (the CPU build's parsers and config).

No server starts: one container runs `adaptive_probe.py`, which feeds each rendered
`vllm serve` argument list to vLLM's own argument parser, checks the speculative keys
against `SpeculativeConfig`'s fields, builds vLLM's batch-size -> K lookup from the
schedule, and asks vLLM's engine config what this CPU build makes of the same fields.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from composer.render.spec import build_spec, resolve
from composer.stack.load import load_stack
from tests.conftest import REPO

pytestmark = [pytest.mark.docker, pytest.mark.vllm_cpu]

VARIANTS = ("mtp-dsd", "mtp-adaptive", "dflash2-adaptive")
PROBE = REPO / "tests" / "vllm_cpu" / "adaptive_probe.py"


@pytest.fixture(scope="module")
def probed(cpu_image: str, cpu_models) -> dict:
    stack = load_stack([REPO / "composer.toml"], env_file=None, environ={})
    argv = [
        {"name": name, "argv": [resolve(part) for part in build_spec(stack, stack.variant(name)).command]}
        for name in VARIANTS
    ]
    mounts = ["-v", f"{PROBE}:/probe.py:ro", "-v", f"{cpu_models}:/models:ro"]
    command = ["docker", "run", "--rm", "-i", "--network", "none", "--entrypoint", "python3", *mounts]
    done = subprocess.run(
        [*command, cpu_image, "/probe.py"],
        input=json.dumps(argv),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_vllms_parser_accepts_the_rendered_argv_and_knows_every_key(probed: dict) -> None:
    for name in VARIANTS:
        parsed = probed["variants"][name]
        assert parsed["unknown_keys"] == [], name
    assert probed["variants"]["mtp-dsd"]["speculative_config"]["num_speculative_tokens_per_batch_size"] == [
        [1, 2, 7],
        [3, 8, 3],
        [9, 512, 0],
    ]
    for name in ("mtp-adaptive", "dflash2-adaptive"):
        assert probed["variants"][name]["speculative_config"]["enable_adaptive_verification"] is True


def test_vllms_schedule_lookup_is_the_stacks(probed: dict) -> None:
    # the stack's schedule ((1, 2, 7), (3, 8, 3), (9, 512, 0)), for batches of 1 to 256
    assert probed["variants"]["mtp-dsd"]["lookup"] == [7] * 2 + [3] * 6 + [0] * 248


def test_cpu_build_takes_the_schedule_and_refuses_adaptive_verification_with_its_own_line(
    probed: dict,
) -> None:
    cpu = probed["cpu"]
    assert cpu["dsd"] == {"ok": True, "schedule": [[1, 1, 3], [2, 256, 0]]}
    # As rendered (VLLM_USE_V2_MODEL_RUNNER=1): the V2 runner needs Triton, which the CPU build lacks.
    assert not cpu["adaptive_v2"]["ok"]
    assert any("Model Runner V2 requires Triton" in line for line in cpu["adaptive_v2"]["lines"])
    assert any(
        "Model Runner V1 does not support: adaptive draft verification" in line
        for line in cpu["adaptive_v1"]["lines"]
    )


def test_the_removed_disable_by_batch_size_key_is_refused_by_vllm(probed: dict) -> None:
    removed = probed["cpu"]["removed"]
    assert not removed["ok"] and "speculative_disable_by_batch_size" in removed["lines"]
    assert any("unexpected_keyword_argument" in line for line in removed["lines"])
