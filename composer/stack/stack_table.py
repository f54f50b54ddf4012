"""The `[stack]` table's settings: each key's environment variable, parser and default
(the loader reads them; `settings` describes them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from composer.stack import values as v


@dataclass(frozen=True)
class Setting:
    """One stack-level setting: its key, environment variable, parser and default."""

    key: str
    env: str | None
    parse: Callable[[object], object]
    default: object
    is_path: bool = False


STACK_SETTINGS: tuple[Setting, ...] = (
    Setting("project", "COMPOSE_PROJECT_NAME", v.parse_name, None),  # None: the stack's folder name
    Setting("service", None, v.parse_name, "vllm"),
    Setting("served_model_name", "SERVED_MODEL_NAME", v.parse_served_name, "model"),
    Setting("port", "VLLM_PORT", v.parse_port, 8000),
    Setting("bind_address", "VLLM_BIND_ADDRESS", v.parse_ip, "127.0.0.1"),
    Setting("tensor_parallel_size", "TENSOR_PARALLEL_SIZE", v.parse_positive_int, 1),
    Setting("max_model_len", "MAX_MODEL_LEN", v.parse_positive_int, 8192),
    Setting("gpus", "GPU_DEVICES", v.parse_gpus, "all"),
    Setting("attention_backend", "ATTENTION_BACKEND", v.parse_attention_backend, "flash_attn"),
    Setting("model_dir", "MODEL_DIR", v.parse_host_path, "./models/model", is_path=True),
    Setting("model_path", None, v.parse_container_path, "/models/model"),
    Setting("draft_dir", "DRAFT_DIR", v.parse_host_path, "./models/draft", is_path=True),
    Setting("draft_path", None, v.parse_container_path, "/models/draft"),
    Setting("start_period", None, v.parse_duration, 900),
    Setting("stop_grace_period", None, v.parse_duration, 30),
    Setting("probation", None, v.parse_probation, 30),
    Setting("restart", None, v.parse_restart, "unless-stopped"),
    Setting("standby", None, v.parse_standby, "stop"),
    Setting("sleep_residue", None, v.parse_size, "1.3G"),
    Setting("gpu_memory_bytes", None, v.parse_optional_size, None),
    Setting("acceptance_floor", None, v.parse_fraction, 0.05),
    Setting("standby_fallback", None, v.parse_standby_fallback, "refuse"),
    Setting("sleep_level", None, v.parse_sleep_level, 1),
    Setting("allow_sleep_level_2_with_speculation", None, v.parse_bool, False),
    Setting("log_max_size", None, v.parse_size, "50MiB"),
    Setting("log_max_files", None, v.parse_log_files, 5),
    Setting("log_probes", None, v.parse_bool, False),
)
