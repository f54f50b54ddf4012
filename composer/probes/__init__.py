"""Facts read from the host, read-only.

Owns: GPU facts (`gpu`: NVML, `nvidia-smi`, or none), checkpoint facts (`checkpoints`:
config.json fields, safetensors sizes) and a container's host PIDs (`cgroups`, from /proc).
Never changes anything. May import: `composer.errors`.
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
