"""The bounded wait for GPU memory release, with a fake probe."""

from __future__ import annotations

import pytest

from composer.probes.gpu import GpuInfo
from composer.swap import gpu_release

GIB = 1 << 30


class DrainingProbe:
    """Reports GPU 0 and 1 busy for `busy_calls` snapshots, then free."""

    name = "fake"
    available = True
    reason = ""

    def __init__(self, busy_calls: int) -> None:
        self.busy_calls = busy_calls
        self.calls = 0

    def gpus(self) -> list[GpuInfo]:
        self.calls += 1
        used = 20 * GIB if self.calls <= self.busy_calls else GIB // 4
        return [GpuInfo(i, "RTX 4090", (8, 9), 24 * GIB, used, 24 * GIB - used) for i in range(2)]


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch):
    monkeypatch.setattr(gpu_release, "INTERVAL", 0.01)


def use_probe(monkeypatch, probe) -> None:
    monkeypatch.setattr("composer.probes.gpu.detect_probe", lambda: probe)


def test_waits_until_memory_is_released(monkeypatch):
    probe = DrainingProbe(busy_calls=3)
    use_probe(monkeypatch, probe)
    said: list[str] = []
    assert gpu_release.wait_for_release(("0", "1"), timeout=5, waiting=said.append) is None
    assert probe.calls == 4 and len(said) == 3


def test_gives_up_after_the_timeout_with_a_note(monkeypatch):
    use_probe(monkeypatch, DrainingProbe(busy_calls=10**9))
    note = gpu_release.wait_for_release(("0",), timeout=0.05, waiting=lambda _: None)
    assert note is not None and "still in use" in note and "GPU 0: 20.0 GiB" in note


def test_only_the_stack_gpus_count(monkeypatch):
    class SecondGpuBusy(DrainingProbe):
        def gpus(self):
            return [
                GpuInfo(0, "a", (8, 9), 24 * GIB, GIB // 4, 0),
                GpuInfo(1, "b", (8, 9), 24 * GIB, 20 * GIB, 0),
            ]

    use_probe(monkeypatch, SecondGpuBusy(busy_calls=0))
    assert gpu_release.wait_for_release(("0",), timeout=0.05, waiting=lambda _: None) is None
    assert "GPU 1" in gpu_release.wait_for_release(("1",), timeout=0.05, waiting=lambda _: None)


def test_skipped_without_gpus_or_probe(monkeypatch):
    assert "skipped" in gpu_release.wait_for_release(None, 1, lambda _: None)

    class NoGpus(DrainingProbe):
        def gpus(self):
            return []

    use_probe(monkeypatch, NoGpus(0))
    assert "skipped" in gpu_release.wait_for_release(("0",), 1, lambda _: None)
