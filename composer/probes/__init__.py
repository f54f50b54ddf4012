"""Facts read from the host, read-only.

Owns: GPU facts behind one small interface (`gpu`: NVML, `nvidia-smi`, or none) and
facts read from checkpoint folders (`checkpoints`: config.json fields, safetensors
header sizes), and the host PIDs of a container's processes (`cgroups`, from /proc). Never
changes anything. May import: `composer.errors`.
Public: `GpuProbe`, `GpuInfo`, `GpuProcess`, `detect_probe`, `select_gpus`,
`read_config`, `mtp_layers`, `dflash_block_size`, `weights_bytes`, `container_pids`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "cgroups": ["container_pids"],
        "checkpoints": ["dflash_block_size", "mtp_layers", "read_config", "weights_bytes"],
        "gpu": ["GpuInfo", "GpuProbe", "GpuProcess", "detect_probe", "select_gpus"],
    },
)
