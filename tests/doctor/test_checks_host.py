"""Host checks: WSL2 detection from a kernel release string, pinned memory, env file mode."""

from __future__ import annotations

from pathlib import Path

from composer.doctor import host_checks as hck
from tests.doctor.fakes import facts

from .fakes import make_stack

WSL2 = "6.6.114.1-microsoft-standard-WSL2"
NATIVE = "6.8.0-45-generic"


def test_is_wsl_reads_the_kernel_release() -> None:
    assert hck.is_wsl(WSL2)
    assert hck.is_wsl("4.4.0-19041-Microsoft")
    assert not hck.is_wsl(NATIVE)


def test_pin_memory_is_rendered_for_v2_runner_methods_so_wsl2_is_ok(tmp_path: Path) -> None:
    toml = '[variants.d3]\nextends = "baseline"\n[variants.d3.speculative]\nmethod = "dflash"\n'
    stack = make_stack(tmp_path, toml + "draft_model = true\nnum_speculative_tokens = 7\n")
    assert dict(stack.variant("d3").env) == {}
    found = hck.check_wsl_pin_memory(facts(stack, "d3"), WSL2)
    assert found.status == "ok" and "VLLM_WSL2_ENABLE_PIN_MEMORY=1" in found.detail
    assert hck.check_wsl_pin_memory(facts(stack, "mtp"), WSL2) is None


def test_pin_memory_overridden_to_zero_fails_on_wsl2_and_warns_elsewhere(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, '[variants.dflash2.env]\nVLLM_WSL2_ENABLE_PIN_MEMORY = "0"\n')
    failed = hck.check_wsl_pin_memory(facts(stack, "dflash2"), WSL2)
    assert failed.status == "fail" and "UVA is not available" in failed.detail
    assert "VLLM_WSL2_ENABLE_PIN_MEMORY" in failed.fix
    warn = hck.check_wsl_pin_memory(facts(stack, "dflash2"), NATIVE)
    assert warn.status == "warn" and "WSL2 host" in warn.detail


def test_env_file_readable_by_others_warns_with_chmod(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("VLLM_API_KEY=x\n")
    env.chmod(0o644)
    warn = hck.check_env_file(env)
    assert warn.status == "warn" and warn.fix == f"chmod 600 {env}"
    env.chmod(0o600)
    assert hck.check_env_file(env).status == "ok"
    assert hck.check_env_file(tmp_path / "absent").status == "ok"
    assert hck.check_env_file(None).status == "ok"


def test_env_file_without_a_secret_is_not_a_permission_problem(tmp_path: Path) -> None:
    demo = tmp_path / ".env.demo"
    demo.write_text("VLLM_IMAGE=vllm-sim:latest\nGPU_DEVICES=none\nVLLM_API_KEY=\n")
    demo.chmod(0o644)
    found = hck.check_env_file(demo)
    assert found.status == "ok" and "holds no secret" in found.detail
    demo.write_text("VLLM_API_KEY=sk-0123456789abcdef\n")
    assert hck.check_env_file(demo).status == "warn"
