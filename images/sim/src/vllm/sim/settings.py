"""Environment variables the simulator reads (SIM_* for the simulation, VLLM_* as vLLM)."""

from __future__ import annotations

import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vllm.sim.sizes import human_readable_int

GIB = 2**30


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _parsed(env: Mapping[str, str], key: str, default: Any, parse: Callable[[str], Any], what: str) -> Any:
    """`parse` of the variable's value, `default` when it is unset or blank."""
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        return parse(raw)
    except ValueError:
        raise ValueError(f"{key} must be {what}, got {raw!r}") from None


def _float(env: Mapping[str, str], key: str, default: float) -> float:
    return _parsed(env, key, default, float, "a number")


def _size(env: Mapping[str, str], key: str, default: int) -> int:
    return _parsed(env, key, default, human_readable_int, "a size like 1073741824 or 1G")


def _optional_float(env: Mapping[str, str], key: str) -> float | None:
    if (env.get(key) or "").strip() == "":
        return None
    value = _float(env, key, 0.0)
    if value < 0:
        raise ValueError(f"{key} must be >= 0, got {value}")
    return value


def _rate(env: Mapping[str, str], key: str, default: int) -> int:
    value = _size(env, key, default)
    if value <= 0:
        raise ValueError(f"{key} must be > 0 bytes per second")
    return value


def _tristate(env: Mapping[str, str], key: str) -> bool | None:
    raw = (env.get(key) or "auto").strip().lower()
    if raw == "auto":
        return None
    if raw in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
        return _flag(raw)
    raise ValueError(f"{key} must be auto, 1 or 0, got {raw!r}")


def _wsl(value: str | None) -> bool:
    if (value or "").strip().lower() == "auto":
        return "microsoft" in platform.release().lower()
    return _flag(value)


def _hybrid(value: str | None) -> str:
    text = (value or "0").strip().lower()
    if text not in {"0", "1", "auto"}:
        raise ValueError(f"SIM_HYBRID_MODEL must be 0, 1 or auto, got {value!r}")
    return text


@dataclass(frozen=True)
class Settings:
    """Simulation knobs; see images/sim/README.md for each variable."""

    time_scale: float = 1.0
    load_seconds: float = 2.0
    profile: str | None = None
    profile_file: str | None = None
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
    cold_start_seconds: float | None = None
    batching: str = ""
    pin_memory: bool | None = None
    h2d_pinned_bytes_per_s: int = int(55e9)
    h2d_pageable_bytes_per_s: int = int(8.5e9)
    d2h_pinned_bytes_per_s: int = int(55e9)
    d2h_pageable_bytes_per_s: int = int(1.36e9)
    reload_bytes_per_s: int = int(2e9)
    sleep_fixed_seconds: float = 0.2
    sleep_residue_bytes: int = int(1.3 * GIB)
    v2_runner_env: str | None = None
    hybrid_model: str = "0"

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
            cold_start_seconds=_optional_float(env, "SIM_COLD_START_SECONDS"),
            batching=env.get("SIM_BATCHING") or "",
            pin_memory=_tristate(env, "SIM_PIN_MEMORY"),
            h2d_pinned_bytes_per_s=_rate(env, "SIM_H2D_PINNED_BYTES_PER_S", int(55e9)),
            h2d_pageable_bytes_per_s=_rate(env, "SIM_H2D_PAGEABLE_BYTES_PER_S", int(8.5e9)),
            d2h_pinned_bytes_per_s=_rate(env, "SIM_D2H_PINNED_BYTES_PER_S", int(55e9)),
            d2h_pageable_bytes_per_s=_rate(env, "SIM_D2H_PAGEABLE_BYTES_PER_S", int(1.36e9)),
            reload_bytes_per_s=_rate(env, "SIM_RELOAD_BYTES_PER_S", int(2e9)),
            sleep_fixed_seconds=max(0.0, _float(env, "SIM_SLEEP_FIXED_SECONDS", 0.2)),
            sleep_residue_bytes=_size(env, "SIM_SLEEP_RESIDUE_BYTES", int(1.3 * GIB)),
            v2_runner_env=(env.get("VLLM_USE_V2_MODEL_RUNNER") or "").strip() or None,
            hybrid_model=_hybrid(env.get("SIM_HYBRID_MODEL")),
        )

    def scaled(self, seconds: float) -> float:
        """A simulated duration in wall-clock seconds."""
        return seconds / self.time_scale

    @property
    def load_wall_seconds(self) -> float:
        """Wall-clock seconds of 'loading': SIM_COLD_START_SECONDS scaled, else SIM_LOAD_SECONDS."""
        if self.cold_start_seconds is not None:
            return self.scaled(self.cold_start_seconds)
        return self.load_seconds

    @property
    def pinned(self) -> bool:
        """Whether host memory is pinned (vLLM turns pinning off under WSL unless asked)."""
        if self.pin_memory is not None:
            return self.pin_memory
        return not self.wsl or self.wsl_pin_memory
