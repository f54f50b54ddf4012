"""The GPU probe: nvidia-smi parsing (through a real executable), NVML, detection, selection."""

from __future__ import annotations

import builtins
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from composer.errors import GpuProbeError
from composer.probes import gpu
from composer.probes.gpu import (
    NoGpuProbe,
    NvidiaSmiProbe,
    NvmlProbe,
    detect_probe,
    select_gpus,
)
from tests.doctor.fakes import rtx4090

SMI_GPUS = (
    "0, GPU-aaaa, NVIDIA GeForce RTX 4090, 8.9, 24564, 20000, 4564\n"
    "1, GPU-bbbb, NVIDIA GeForce RTX 4090, 8.9, 24564, 1, 24563\n"
)
SMI_APPS = "GPU-aaaa, 4242, /usr/bin/python3, 19990\nGPU-aaaa, 77, [Not Found], [N/A]\n"


def fake_smi(bin_dir: Path, gpus: str = SMI_GPUS, apps: str = SMI_APPS, rc: int = 0) -> Path:
    """A real `nvidia-smi` executable on disk that prints canned CSV."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "gpus.csv").write_text(gpus)
    (bin_dir / "apps.csv").write_text(apps)
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f"[ {rc} -ne 0 ] && {{ echo 'NVIDIA-SMI has failed' >&2; exit {rc}; }}\n"
        f'case "$1" in --query-gpu=*) cat "{bin_dir}/gpus.csv";; *) cat "{bin_dir}/apps.csv";; esac\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_nvidia_smi_probe_reads_memory_capability_and_processes(tmp_path: Path) -> None:
    gpus = NvidiaSmiProbe(str(fake_smi(tmp_path))).gpus()
    assert [g.index for g in gpus] == [0, 1]
    first = gpus[0]
    assert first.compute_capability == (8, 9)
    assert first.total_bytes == 24564 * gpu.MIB and first.free_bytes == 4564 * gpu.MIB
    assert first.uuid == "GPU-aaaa" and first.sm == "SM 8.9"
    assert [(p.pid, p.name, p.used_bytes) for p in first.processes] == [
        (4242, "/usr/bin/python3", 19990 * gpu.MIB),
        (77, "[Not Found]", None),
    ]
    assert gpus[1].processes == ()


def test_nvidia_smi_failure_raises_probe_error(tmp_path: Path) -> None:
    with pytest.raises(GpuProbeError, match="NVIDIA-SMI has failed"):
        NvidiaSmiProbe(str(fake_smi(tmp_path, rc=9))).gpus()


def test_unexpected_nvidia_smi_output_raises_probe_error() -> None:
    with pytest.raises(GpuProbeError):
        gpu.parse_smi_gpus("0, GPU-a, name, 8.9, [N/A], 1, 2\n")
    with pytest.raises(GpuProbeError):
        gpu.parse_smi_gpus("0, too, few\n")


def test_nvml_probe_reads_devices_through_pynvml_api() -> None:
    calls: list[str] = []
    proc = SimpleNamespace(pid=4242, usedGpuMemory=3 * 2**30)
    nvml = SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=24 * 2**30, used=3 * 2**30, free=21 * 2**30),
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        nvmlDeviceGetName=lambda h: b"NVIDIA H100",
        nvmlDeviceGetUUID=lambda h: "GPU-h100",
        nvmlDeviceGetComputeRunningProcesses=lambda h: [proc],
        nvmlSystemGetProcessName=lambda pid: "vllm",
    )
    (found,) = NvmlProbe(nvml).gpus()
    assert (found.name, found.compute_capability, found.uuid) == ("NVIDIA H100", (9, 0), "GPU-h100")
    assert found.processes[0].name == "vllm" and found.processes[0].used_bytes == 3 * 2**30
    assert calls == ["init", "shutdown"]


def test_detect_probe_prefers_nvidia_smi_on_path_without_pynvml(tmp_path: Path, monkeypatch) -> None:
    block_pynvml(monkeypatch)
    fake_smi(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    probe = detect_probe()
    assert isinstance(probe, NvidiaSmiProbe) and probe.available
    assert len(probe.gpus()) == 2


def test_detect_probe_without_any_tool_reports_not_available(tmp_path: Path, monkeypatch) -> None:
    block_pynvml(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))
    probe = detect_probe()
    assert isinstance(probe, NoGpuProbe)
    assert not probe.available and probe.gpus() == [] and "nvidia-smi" in probe.reason


def test_select_gpus_by_index_uuid_all_and_none() -> None:
    gpus = [rtx4090(0), rtx4090(1), rtx4090(2)]
    assert [g.index for g in select_gpus(gpus, ("0", "2"))] == [0, 2]
    assert len(select_gpus(gpus, ("all",))) == 3
    assert select_gpus(gpus, None) == []


def block_pynvml(monkeypatch) -> None:
    """Make `import pynvml` fail even where nvidia-ml-py is installed."""
    real_import = builtins.__import__

    def guarded(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError("blocked for the test")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", guarded)
