"""Where the simulator was changed to behave like real vLLM 0.32.0 (images/vllm-cpu/captures/):
a flag before the model, and a head size the CPU attention backend has no kernel for."""

from __future__ import annotations

import json
from pathlib import Path

from .simproc import SimProcess, run_sim

REAL = Path(__file__).resolve().parents[2] / "images" / "vllm-cpu" / "captures"
MODEL_NOT_FIRST = (
    "ValueError: `model` should be provided as the first positional argument when using "
    "`vllm serve`. i.e. `vllm serve <model> --<arg> <value>`."
)


def checkpoint(directory: Path, head_dim: int) -> str:
    """A config-only checkpoint of the tiny Qwen3's shape with the given head size."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 256,
        "num_attention_heads": 256 // head_dim,
        "num_key_value_heads": 2,
        "head_dim": head_dim,
        "max_position_embeddings": 4096,
    }
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


def test_the_real_lines_are_the_ones_the_simulator_prints() -> None:
    assert MODEL_NOT_FIRST in (REAL / "fail-model-not-first-positional.log").read_text()
    head_dim = (REAL / "fail-head-dim-16.log").read_text()
    assert "Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0" in head_dim
    assert "EngineDeadError: EngineCore encountered an issue" in head_dim


def test_a_flag_before_the_model_is_refused_with_vllms_value_error(tmp_path: Path) -> None:
    model = checkpoint(tmp_path / "m", 64)
    result = run_sim(["--served-model-name", "tiny", model])
    assert result.returncode == 1, result.stdout
    assert result.stdout.rstrip().endswith(MODEL_NOT_FIRST), result.stdout[-800:]
    assert "Traceback (most recent call last):" in result.stdout
    assert "(APIServer pid=" not in result.stdout.split("Traceback")[1]  # uncaught: no log prefix


def test_model_option_moves_to_the_front_with_vllms_warning(tmp_path: Path) -> None:
    model = checkpoint(tmp_path / "m", 64)
    result = run_sim(["--served-model-name", "tiny", "--model", model], env={"SIM_FAIL": "crash"})
    assert MODEL_NOT_FIRST not in result.stdout
    assert "the `--model` option will be removed in a future version" in result.stdout.lower()
    assert f"'model_tag': '{model}'" in result.stdout  # parsed as the positional model
    # without --served-model-name real vLLM parses a flag before the model
    result = run_sim(["--max-model-len", "1024", model], env={"SIM_FAIL": "crash"})
    assert MODEL_NOT_FIRST not in result.stdout
    assert "'max_model_len': 1024" in result.stdout


def test_configuration_tracebacks_have_no_log_prefix() -> None:
    """vLLM's API server does not catch them: Python prints the traceback bare (as recorded)."""
    assert "\nTraceback (most recent call last):" in (REAL / "fail-unknown-method.log").read_text()
    result = run_sim(["/nowhere", "--speculative-config", json.dumps({"method": "foo"})])
    assert result.returncode == 1
    assert "\nTraceback (most recent call last):" in result.stdout, result.stdout[-1000:]
    assert "pid=1) Traceback" not in result.stdout and ") Traceback" not in result.stdout
    assert (
        "\npydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig"
        in result.stdout
    )


def test_head_dim_without_a_cpu_kernel_passes_health_then_dies_on_the_first_request(tmp_path: Path) -> None:
    model = checkpoint(tmp_path / "hd16", 16)
    server = SimProcess.start(
        [model, "--served-model-name", "tiny", "--attention-backend", "cpu_attn"],
        api_key="k" * 32,
        log_dir=tmp_path,
    )
    try:
        server.wait_ready()
        assert server.request("GET", "/health")[0] == 200
        body = {"model": "tiny", "prompt": "hello", "max_tokens": 1}
        status, raw = server.request("POST", "/v1/completions", body)
        assert status == 500, raw
        assert b"EngineCore encountered an issue" in raw
        assert server.proc.wait(timeout=10) == 0  # the server shuts down, exit code 0 as real vLLM
        out = server.output()
        assert (
            "RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0" in out
        )
        assert (
            "RuntimeError: Worker failed with error 'Unsupported CPU attention configuration: head_dim=16"
            in out
        )
        assert "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue." in out
    finally:
        server.stop()


def test_a_supported_head_dim_on_cpu_attn_and_head_dim_16_on_a_gpu_backend_serve(tmp_path: Path) -> None:
    for model, backend in (
        (checkpoint(tmp_path / "hd64", 64), "cpu_attn"),
        (checkpoint(tmp_path / "g", 16), "triton_attn"),
    ):
        server = SimProcess.start(
            [model, "--served-model-name", "tiny", "--attention-backend", backend],
            api_key="k" * 32,
            log_dir=tmp_path,
        )
        try:
            server.wait_ready()
            body = {"model": "tiny", "prompt": "hello", "max_tokens": 2}
            status, raw = server.request("POST", "/v1/completions", body)
            assert status == 200, (backend, raw)
        finally:
            server.stop()
