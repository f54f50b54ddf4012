"""GPU facts behind one small interface: NVML, `nvidia-smi`, or nothing (`detect_probe`).

`gpus()` returns a fresh snapshot on each call (one NVML query or one `nvidia-smi` run),
an empty list when no GPU is available, and raises `GpuProbeError` when the tool is there
but fails; `select_gpus` picks a stack's GPUs from it.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from composer.errors import GpuProbeError

MIB = 1 << 20
SMI_TIMEOUT = 15
SMI_GPU_FIELDS = "index,uuid,name,compute_cap,memory.total,memory.used,memory.free"
SMI_APP_FIELDS = "gpu_uuid,pid,process_name,used_memory"


@dataclass(frozen=True)
class GpuProcess:
    """A process holding GPU memory; `used_bytes` is None when the driver does not say."""

    pid: int
    name: str
    used_bytes: int | None = None


@dataclass(frozen=True)
class GpuInfo:
    """One GPU: identity, compute capability (major, minor) and memory in bytes."""

    index: int
    name: str
    compute_capability: tuple[int, int]
    total_bytes: int
    used_bytes: int
    free_bytes: int
    processes: tuple[GpuProcess, ...] = ()
    uuid: str = ""

    @property
    def sm(self) -> str:
        """Compute capability as `SM 8.9`."""
        return f"SM {self.compute_capability[0]}.{self.compute_capability[1]}"


class GpuProbe(Protocol):
    """Anything that lists GPUs. `available` is False when `gpus()` will be empty."""

    name: str
    available: bool
    reason: str

    def gpus(self) -> list[GpuInfo]:
        """A snapshot of every GPU the host sees."""
        ...


class NoGpuProbe:
    """No NVML and no `nvidia-smi`: reports no GPUs, with the reason."""

    name = "none"
    available = False
    reason = "no NVML (pynvml) and no nvidia-smi on PATH"

    def gpus(self) -> list[GpuInfo]:
        return []


class NvidiaSmiProbe:
    """Reads `nvidia-smi --query-gpu` and `--query-compute-apps` (CSV, no units)."""

    name = "nvidia-smi"
    available = True
    reason = ""

    def __init__(self, binary: str = "nvidia-smi") -> None:
        self.binary = binary

    def gpus(self) -> list[GpuInfo]:
        gpus = parse_smi_gpus(self._query("--query-gpu=" + SMI_GPU_FIELDS))
        try:
            apps = parse_smi_apps(self._query("--query-compute-apps=" + SMI_APP_FIELDS))
        except GpuProbeError:
            apps = {}  # process lists are optional (e.g. not reported under WSL2)
        return [replace(g, processes=apps.get(g.uuid, ())) for g in gpus]

    def _query(self, query: str) -> str:
        argv = [self.binary, query, "--format=csv,noheader,nounits"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=SMI_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise GpuProbeError(f"`{' '.join(argv)}` did not run: {err}") from err
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip().splitlines()
            raise GpuProbeError(f"`nvidia-smi` failed: {message[-1] if message else done.returncode}")
        return done.stdout


class NvmlProbe:
    """Reads NVML through `pynvml` (the nvidia-ml-py package)."""

    name = "nvml"
    available = True
    reason = ""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml

    def gpus(self) -> list[GpuInfo]:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except Exception as err:  # pynvml raises NVMLError subclasses
            raise GpuProbeError(f"NVML could not start: {err}") from err
        try:
            return [self._gpu(i) for i in range(nvml.nvmlDeviceGetCount())]
        except Exception as err:
            raise GpuProbeError(f"NVML query failed: {err}") from err
        finally:
            nvml.nvmlShutdown()

    def _gpu(self, index: int) -> GpuInfo:
        nvml = self.nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        sizes = (int(memory.total), int(memory.used), int(memory.free))
        name, uuid = _text(nvml.nvmlDeviceGetName(handle)), _text(nvml.nvmlDeviceGetUUID(handle))
        return GpuInfo(index, name, (int(major), int(minor)), *sizes, tuple(self._processes(handle)), uuid)

    def _processes(self, handle: Any) -> list[GpuProcess]:
        nvml = self.nvml
        try:
            running = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except Exception:
            return []
        found = []
        for proc in running:
            try:
                name = _text(nvml.nvmlSystemGetProcessName(proc.pid))
            except Exception:
                name = "?"
            used = getattr(proc, "usedGpuMemory", None)
            found.append(GpuProcess(int(proc.pid), name, int(used) if used is not None else None))
        return found


def detect_probe() -> GpuProbe:
    """NVML when `pynvml` imports and initialises, else `nvidia-smi` on PATH, else NoGpuProbe."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return NvmlProbe(pynvml)
    except ImportError:
        pass  # no library: try nvidia-smi
    except Exception:
        pass  # a library without a driver: try nvidia-smi
    smi = shutil.which("nvidia-smi")
    return NvidiaSmiProbe(smi) if smi else NoGpuProbe()


def select_gpus(gpus: Sequence[GpuInfo], devices: Sequence[str] | None) -> list[GpuInfo]:
    """The GPUs a stack's device list names (indices or UUIDs); all for `("all",)`, none for None."""
    if devices is None:
        return []
    if tuple(devices) == ("all",):
        return list(gpus)
    wanted = set(devices)
    return [g for g in gpus if str(g.index) in wanted or (g.uuid and g.uuid in wanted)]


def parse_smi_gpus(csv_text: str) -> list[GpuInfo]:
    """GPUs from `nvidia-smi --query-gpu=<SMI_GPU_FIELDS> --format=csv,noheader,nounits`."""
    gpus = []
    for row in _rows(csv_text):
        if len(row) != 7:
            raise GpuProbeError(f"unexpected nvidia-smi line: {', '.join(row)}")
        index, uuid, name, cap, total, used, free = row
        major, _, minor = cap.partition(".")
        sizes = (_int(total) * MIB, _int(used) * MIB, _int(free) * MIB)
        gpus.append(GpuInfo(int(index), name, (_int(major), _int(minor)), *sizes, uuid=uuid))
    return gpus


def parse_smi_apps(csv_text: str) -> dict[str, tuple[GpuProcess, ...]]:
    """Processes per GPU UUID from `nvidia-smi --query-compute-apps=<SMI_APP_FIELDS>`."""
    found: dict[str, list[GpuProcess]] = {}
    for row in _rows(csv_text):
        if len(row) != 4 or not row[1].isdigit():
            continue
        uuid, pid, name, used = row
        used_bytes = _int(used) * MIB if used.isdigit() else None
        found.setdefault(uuid, []).append(GpuProcess(int(pid), name, used_bytes))
    return {uuid: tuple(procs) for uuid, procs in found.items()}


def _rows(csv_text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split(",")] for line in csv_text.splitlines() if line.strip()]


def _int(value: str) -> int:
    try:
        return int(float(value))
    except ValueError as err:
        raise GpuProbeError(f"unexpected nvidia-smi value {value!r}") from err


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
