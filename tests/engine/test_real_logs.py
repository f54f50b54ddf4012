"""The log readers against what real vLLM 0.32.0 (CPU build) printed: images/vllm-cpu/captures.

Pure: no Docker. Every `fail-*.log` there must be diagnosed, by the signature named here,
and every boot log must give its KV cache size and the stages in order.
"""

from __future__ import annotations

import pytest

from composer.engine import bootlog, diagnose
from tests.conftest import REPO

CAPTURES = REPO / "images" / "vllm-cpu" / "captures"
DIAGNOSED = {
    "fail-bf16-amx.log": ("worker-illegal-instruction", "Worker proc VllmWorker-0 died unexpectedly"),
    "fail-head-dim-16.log": (
        "cpu-attention-unsupported",
        "Unsupported CPU attention configuration: head_dim=16",
    ),
    "fail-max-model-len.log": ("max-model-len-too-large", "User-specified max_model_len (8192)"),
    "fail-model-not-first-positional.log": (
        "model-not-first-positional",
        "should be provided as the first positional argument",
    ),
    "fail-no-kv-budget.log": ("engine-core-init-failed", "Engine core initialization failed"),
    "fail-sleep-mode.log": ("sleep-mode-unsupported", "Sleep mode is not supported on current platform"),
    "fail-small-shm.log": ("shm-too-small", "Insufficient space in /dev/shm"),
    "fail-spec-tensor-parallel.log": (
        "invalid-speculative-config",
        "'tensor_parallel_size' is not a valid argument in the speculative_config",
    ),
    "fail-unknown-flag.log": ("unrecognized-arguments", "vllm: error: unrecognized arguments: --foo"),
    "fail-unknown-method.log": ("unknown-speculative-method", "input_value='foo'"),
}
KV_TOKENS = {"boot-baseline.log": 131_072, "boot-ngram.log": 131_072, "boot-draft.log": 87_296}
ORDER = (
    "loading",
    "weights loaded",
    "KV cache allocated",
    "engine initialised",
    "starting server",
    "server ready",
)


def test_every_failure_capture_is_listed():
    assert sorted(p.name for p in CAPTURES.glob("fail-*.log")) == sorted(DIAGNOSED)


@pytest.mark.parametrize("name", sorted(DIAGNOSED))
def test_failure_capture_is_diagnosed(name: str):
    log = (CAPTURES / name).read_text()
    expected, line = DIAGNOSED[name]
    assert line in log  # the capture holds the real failure line
    found = [s.name for s in diagnose.explain(log)]
    assert found[0] == expected, found
    hints = diagnose.hints(log)
    assert hints and all("Fix:" in h for h in hints)


def test_signatures_do_not_cross_match():
    """A capture's own signature is the only one among the capture-specific ones it matches."""
    specific = {expected for expected, _ in DIAGNOSED.values()} - {"engine-core-init-failed"}
    for name, (expected, _) in DIAGNOSED.items():
        found = {s.name for s in diagnose.explain((CAPTURES / name).read_text())} & specific
        assert found <= {expected}, (name, found)


def test_healthy_boot_logs_match_no_signature():
    for name in KV_TOKENS:
        assert diagnose.explain((CAPTURES / name).read_text()) == [], name


@pytest.mark.parametrize("name", sorted(KV_TOKENS))
def test_kv_cache_tokens_from_the_real_line(name: str):
    log = (CAPTURES / name).read_text()
    assert "CPU KV cache size: " in log  # prefixed, with thousands separators
    assert bootlog.kv_cache_tokens(log) == KV_TOKENS[name]


@pytest.mark.parametrize("name", sorted(KV_TOKENS))
def test_boot_stages_in_order(name: str):
    """Reading the log line by line, as the gate does, walks the stages forward to ready."""
    lines = (CAPTURES / name).read_text().splitlines()
    seen: list[str] = []
    for end in range(len(lines) + 1):
        stage = bootlog.boot_stage("\n".join(lines[:end]))
        if not seen or seen[-1] != stage:
            seen.append(stage)
    assert seen == list(ORDER)  # the CPU build prints no `Model loading took` line
