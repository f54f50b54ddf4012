"""Environment variables the simulator reads (SIM_* for the simulation, VLLM_* as vLLM)."""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass

from vllm.sim.sizes import human_readable_int

GIB = 2**30


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _float(env: Mapping[str, str], key: str, default: float) -> float:
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{key} must be a number, got {raw!r}") from None


def _size(env: Mapping[str, str], key: str, default: int) -> int:
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        return human_readable_int(raw)
    except ValueError:
        raise ValueError(f"{key} must be a size like 1073741824 or 1G, got {raw!r}") from None


def _wsl(value: str | None) -> bool:
    if (value or "").strip().lower() == "auto":
        return "microsoft" in platform.release().lower()
    return _flag(value)


@dataclass(frozen=True)
class Settings:
    """Simulation knobs; see images/sim/README.md for each variable."""

    time_scale: float = 1.0
    load_seconds: float = 2.0
    profile: str | None = None
    profile_file: str | None = None
    seed: int = 0
    flip_rate: float = 0.0
    fail: str = ""
    wsl: bool = False
    gpu_capability: float = 8.9
    gpu_memory_bytes: int = 24 * GIB
    weights_bytes: int = int(13.5 * GIB)
    activation_bytes: int = int(1.58 * GIB)
    kv_bytes_per_token: int = 19328
    min_shm_bytes: int = GIB
    default_attention_backend: str = "TRITON_ATTN"
    api_key_env: str | None = None
    dev_mode: bool = False
    wsl_pin_memory: bool = False
    flash_attn_version: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Read the settings from an environment mapping."""
        scale = _float(env, "SIM_TIME_SCALE", 1.0)
        if scale <= 0:
            raise ValueError("SIM_TIME_SCALE must be > 0")
        flip = _float(env, "SIM_FLIP_RATE", 0.0)
        if not 0 <= flip <= 1:
            raise ValueError("SIM_FLIP_RATE must be within [0, 1]")
        return cls(
            time_scale=scale,
            load_seconds=max(0.0, _float(env, "SIM_LOAD_SECONDS", 2.0)),
            profile=env.get("SIM_PROFILE") or None,
            profile_file=env.get("SIM_PROFILE_FILE") or None,
            seed=int(_float(env, "SIM_SEED", 0)),
            flip_rate=flip,
            fail=(env.get("SIM_FAIL") or "").strip().lower(),
            wsl=_wsl(env.get("SIM_WSL")),
            gpu_capability=_float(env, "SIM_GPU_CAPABILITY", 8.9),
            gpu_memory_bytes=_size(env, "SIM_GPU_MEMORY_BYTES", 24 * GIB),
            weights_bytes=_size(env, "SIM_WEIGHTS_BYTES", int(13.5 * GIB)),
            activation_bytes=_size(env, "SIM_ACTIVATION_BYTES", int(1.58 * GIB)),
            kv_bytes_per_token=_size(env, "SIM_KV_BYTES_PER_TOKEN", 19328),
            min_shm_bytes=_size(env, "SIM_MIN_SHM_BYTES", GIB),
            default_attention_backend=(
                env.get("VLLM_ATTENTION_BACKEND") or env.get("SIM_DEFAULT_ATTENTION_BACKEND") or "TRITON_ATTN"
            ).upper(),
            api_key_env=env.get("VLLM_API_KEY") or None,
            dev_mode=_flag(env.get("VLLM_SERVER_DEV_MODE")),
            wsl_pin_memory=_flag(env.get("VLLM_WSL2_ENABLE_PIN_MEMORY")),
            flash_attn_version=env.get("VLLM_FLASH_ATTN_VERSION") or None,
        )

    def scaled(self, seconds: float) -> float:
        """A simulated duration in wall-clock seconds."""
        return seconds / self.time_scale
