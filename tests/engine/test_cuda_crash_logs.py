"""The CUDA crashes and the dead engine, as vLLM prints them, in `logs --explain` and the
failed-swap hints.

The logs in vllm_logs/ are excerpts of what vLLM printed in public reports (vllm-project/vllm
issues 20170 and 19483 for the runtime crash and EngineDeadError, 40952 and 27430 for the
launch failure at boot), with their own line prefixes. Pure: no Docker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from composer.engine import diagnose
from composer.swap.service_logs import explanations

LOGS = Path(__file__).parent / "vllm_logs"
CASES = {
    "runtime-illegal-memory-access.log": (
        "cuda-illegal-memory-access",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        ("num_speculative_tokens", "attention_backend"),
    ),
    "runtime-engine-dead.log": (
        "engine-dead",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue",
        ("lines above EngineDeadError",),
    ),
    "boot-unspecified-launch-failure.log": (
        "cuda-launch-failure",
        "torch.AcceleratorError: CUDA error: unspecified launch failure",
        ("driver", "image's CUDA"),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_real_line_is_explained_first_with_its_fix(name: str):
    log = (LOGS / name).read_text()
    expected, line, fix_words = CASES[name]
    assert line in log
    found = diagnose.explain(log)
    assert found and found[0].name == expected, [s.name for s in found]
    assert all(word in found[0].fix for word in fix_words)
    explained = explanations(log)[0]  # what `logs --explain` prints
    assert explained.startswith(f"{expected}: ") and "\n  fix: " in explained


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_failed_swap_hints_name_the_fix(name: str):
    """The swap's failure hints (diagnose.hints on the log tail) carry the same fix."""
    log = (LOGS / name).read_text()
    _, _, fix_words = CASES[name]
    first = diagnose.hints(log)[0]
    assert "Fix:" in first and all(word in first for word in fix_words)


def test_a_runtime_crash_names_the_engine_death_after_its_cause():
    """The illegal access comes first; the EngineDeadError that follows it is listed too."""
    names = [s.name for s in diagnose.explain((LOGS / "runtime-illegal-memory-access.log").read_text())]
    assert names.index("cuda-illegal-memory-access") < names.index("engine-dead")


def test_the_launch_failure_at_boot_comes_before_the_generic_init_failure():
    names = [s.name for s in diagnose.explain((LOGS / "boot-unspecified-launch-failure.log").read_text())]
    assert names[0] == "cuda-launch-failure" and "engine-core-init-failed" in names
    assert "cuda-illegal-memory-access" not in names and "engine-dead" not in names


def test_the_hints_after_a_failed_swap_name_the_kept_log() -> None:
    found = diagnose.explain(
        "MQLLMEngine is already dead\nEngine core initialization failed. See root cause above"
    )
    assert [s.name for s in found] == ["engine-dead", "engine-core-init-failed"]
    assert all("compose-spec logs --failed" in s.fix for s in found)  # the rolled-back container is gone
