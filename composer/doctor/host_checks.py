"""Host checks: WSL2 pinned memory for the V2 model runner, and the env file's permissions."""

from __future__ import annotations

import stat
from pathlib import Path

from composer.doctor.preflight import Finding, VariantFacts
from composer.render.spec import PIN_MEMORY_VAR
from composer.stack.values import V2_RUNNER_METHODS


def is_wsl(release: str) -> bool:
    """True for a WSL2 kernel: vLLM's own test is "microsoft" in the kernel release."""
    return "microsoft" in release.lower()


def check_wsl_pin_memory(variant: VariantFacts, release: str) -> Finding | None:
    """On WSL2, a V2-runner variant must set VLLM_WSL2_ENABLE_PIN_MEMORY=1; None when not relevant."""
    method = variant.speculative.method if variant.speculative is not None else None
    if method not in V2_RUNNER_METHODS:
        return None
    value = variant.environment.get(PIN_MEMORY_VAR)
    if value == "1":
        return Finding("wsl2-pin-memory", "ok", f"{PIN_MEMORY_VAR}=1 is set for method {method}")
    shown = "unset" if value is None else f"{value!r}"
    if not is_wsl(release):
        if value is None:
            return Finding(
                "wsl2-pin-memory", "ok", f"not WSL2 (kernel {release}): {PIN_MEMORY_VAR} is not needed here"
            )
        return Finding(
            "wsl2-pin-memory",
            "warn",
            f"not WSL2 here (kernel {release}), but {PIN_MEMORY_VAR} is {shown} for method {method}: "
            "the committed compose file fails on a WSL2 host ('UVA is not available')",
            f"drop the {PIN_MEMORY_VAR} override from [{variant.table}.env]",
        )
    return Finding(
        "wsl2-pin-memory",
        "fail",
        f"WSL2 kernel {release} and method {method} (V2 model runner needs pinned memory/UVA), "
        f"but {PIN_MEMORY_VAR} is {shown}: vLLM fails with 'UVA is not available'",
        f'set {PIN_MEMORY_VAR} = "1" in [{variant.table}.env] (or drop the override)',
    )


SECRET_VARS = ("VLLM_API_KEY",)


def holds_secret(path: Path) -> bool:
    """True when the env file sets a secret (VLLM_API_KEY) to a non-empty value, or cannot be read."""
    from composer.errors import ConfigError
    from composer.stack.files import read_dotenv

    try:
        values, _ = read_dotenv(path)
    except ConfigError:
        return True  # cannot tell: treat it as secret
    return any(values.get(name) for name in SECRET_VARS)


def check_env_file(path: str | Path | None) -> Finding:
    """An env file that holds a secret (VLLM_API_KEY) is not readable by group or others."""
    if path is None or not Path(path).is_file():
        return Finding("env-file", "ok", f"no env file at {path}" if path else "no env file in use")
    mode = stat.S_IMODE(Path(path).stat().st_mode)
    if not holds_secret(Path(path)):
        return Finding("env-file", "ok", f"{path} holds no secret (mode {mode:04o} is fine)")
    if mode & 0o044:
        return Finding(
            "env-file",
            "warn",
            f"{path} has mode {mode:04o}: readable by group or others",
            f"chmod 600 {path}",
        )
    return Finding("env-file", "ok", f"{path} has mode {mode:04o}")
