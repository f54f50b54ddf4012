"""doctor's standby check: the planner's verdict and the cost in words."""

from __future__ import annotations

from composer.capacity import inputs as standby
from composer.doctor.gpu_checks import GpuFacts, check_standby
from composer.probes.gpu import GpuInfo
from composer.stack.load import load_stack
from tests.conftest import REPO, shipped_variants

GIB = 1 << 30
WEIGHTS = tuple(f"variants.{v}.weights_bytes=13.5G" for v in shipped_variants())


def _stack(*flags: str):
    return load_stack([REPO / "composer.toml"], REPO / ".env.demo", environ={}, flags=list(flags))


def _gpus(total: int) -> GpuFacts:
    gpus = tuple(GpuInfo(i, "H200", (9, 0), total, 0, total) for i in range(4))
    return GpuFacts(gpus, gpus)


def test_no_sleep_standby_no_check() -> None:
    assert check_standby(_stack(), GpuFacts(demo=True)) is None


def test_a_standby_that_fits_the_probed_gpus_is_ok_with_its_cost_in_tokens(monkeypatch) -> None:
    monkeypatch.setattr(standby, "host_memory", lambda: 1024 * GIB)
    found = check_standby(_stack("stack.standby=sleep", "stack.gpus=all", *WEIGHTS), _gpus(141 * GIB))
    assert found is not None and found.status == "ok", found
    assert "standby of mtp costs 1.3 GiB of KV cache per GPU = 85,000 tokens" in found.detail


def test_a_standby_that_does_not_fit_fails_with_the_numbers_or_warns_with_the_fallback(monkeypatch) -> None:
    monkeypatch.setattr(standby, "host_memory", lambda: 1024 * GIB)
    flags = ("stack.standby=sleep", "stack.gpus=all", *WEIGHTS)
    found = check_standby(_stack(*flags), _gpus(24 * GIB))
    assert found is not None and found.status == "fail"
    assert "above the GPU's 24.0 GiB (probed by the GPU probe)" in found.detail
    # no GPU seen: the configured size is used
    found = check_standby(_stack(*flags, "stack.gpu_memory_bytes=141G"), GpuFacts(unavailable="no GPU"))
    assert found is not None and found.status == "ok"
    found = check_standby(_stack(*flags, "stack.standby_fallback=stop"), _gpus(24 * GIB))
    assert found is not None and found.status == "warn" and "stops the variant instead" in found.detail
