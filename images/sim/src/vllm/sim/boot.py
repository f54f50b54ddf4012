"""Start-up like ``vllm serve``: config checks, engine 'loading', KV budget, then serve.

The port opens only after loading; every failure prints vLLM's message and exits non-zero.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from vllm.config.speculative import ValidationError
from vllm.sim import adaptive, kv, model_config
from vllm.sim.engine import Engine
from vllm.sim.failures import (
    CUDA_OOM,
    FA3_UNSUPPORTED,
    EngineInitError,
    attention_kernel_error,
    hang_forever,
    nccl_shm_error,
    report_engine_failure,
    schedule_crash,
    shm_bytes,
    validate_fail_mode,
)
from vllm.sim.http_server import ServerState, make_server
from vllm.sim.logs import VllmLog, traceback_text
from vllm.sim.metrics import Metrics
from vllm.sim.profiles import resolve_profile
from vllm.sim.settings import Settings
from vllm.sim.sizes import gib
from vllm.sim.sleep import SleepConfig, SleepMode
from vllm.sim.spec_setup import ResolvedSpec, Runtime, resolve_spec
from vllm.version import __version__

DRAFT_WEIGHTS_BYTES = int(0.9 * 2**30)
ROUTES = ("/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions", "/version")
SLEEP_ROUTES = ("/sleep", "/wake_up", "/is_sleeping", "/collective_rpc")


@dataclass(frozen=True)
class BootPlan:
    """Everything decided before the engine starts."""

    args: argparse.Namespace
    settings: Settings
    served_names: list[str]
    api_key: str | None
    target_config: dict[str, Any]
    derived_max_len: int
    attention_backend: str
    spec: ResolvedSpec
    crash_after: float | None
    first_request_error: str | None = None
    """What kills the engine on its first request (a head size the attention backend lacks)."""


def _install_signal_handlers(log: VllmLog) -> None:
    def stop(signum: int, _frame: Any) -> None:
        log.info("launcher.py:110", "Shutting down FastAPI HTTP server.")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def _non_default_args(args: argparse.Namespace) -> dict[str, Any]:
    from vllm.entrypoints.cli.serve_args import make_parser

    defaults = vars(make_parser().parse_args([]))
    shown = {k: v for k, v in vars(args).items() if defaults.get(k, object()) != v}
    if args.model_tag:
        shown.pop("model", None)
    if shown.get("api_key"):
        shown["api_key"] = "***"
    return shown


def plan_boot(args: argparse.Namespace, settings: Settings, log: VllmLog) -> BootPlan:
    """The API-server side checks (raise ValidationError/ValueError like vLLM's config)."""
    crash_after = validate_fail_mode(settings.fail)
    target = model_config.read_config(args.model)
    derived = model_config.max_position_embeddings(target) or model_config.DEFAULT_MAX_POSITION
    if args.max_model_len is not None and args.max_model_len > derived and target:
        raise ValueError(
            f"User-specified max_model_len ({args.max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={derived} or model_max_length=None in "
            "model's config.json). To allow overriding this maximum, set the env var "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
        )
    backend = args.attention_backend or settings.default_attention_backend
    hybrid = settings.hybrid_model == "1" or (settings.hybrid_model == "auto" and adaptive.is_hybrid(target))
    runtime = Runtime(settings.v2_runner_env, bool(getattr(args, "enforce_eager", False)), hybrid)
    spec = resolve_spec(args.speculative_config, target, backend, log, runtime)
    return BootPlan(
        args=args,
        settings=settings,
        served_names=list(args.served_model_name or [args.model]),
        api_key=args.api_key or settings.api_key_env,
        target_config=target,
        derived_max_len=derived,
        attention_backend=backend,
        spec=spec,
        crash_after=crash_after,
        first_request_error=attention_kernel_error(backend, target),
    )


def _device_checks(plan: BootPlan, core: VllmLog) -> None:
    """Failures that happen while workers initialise (before weights load)."""
    settings = plan.settings
    if settings.wsl:
        core.warning(
            "interface.py:393",
            "Using 'pin_memory=False' as WSL is detected. This may slow down the performance.",
        )
    if plan.args.tensor_parallel_size > 1:
        shm = shm_bytes()
        if shm is not None and shm < settings.min_shm_bytes:
            raise nccl_shm_error(shm)
    uses_flash_attn = plan.attention_backend == "FLASH_ATTN" or (
        plan.spec.config is not None and (plan.spec.config.attention_backend or "").upper() == "FLASH_ATTN"
    )
    if settings.flash_attn_version == "3" and settings.gpu_capability < 9.0 and uses_flash_attn:
        raise EngineInitError("AssertionError", log_lines=(("fa_utils.py:72", FA3_UNSUPPORTED),))
    if plan.spec.needs_v2_runner and settings.wsl and not settings.wsl_pin_memory:
        raise EngineInitError("RuntimeError: UVA is not available")
    refused = _adaptive_refused_backend(plan)
    if refused is not None:
        raise EngineInitError(
            "ValueError: Adaptive verification trims verification requests on device, which the "
            f"{refused} attention backend does not support. Pass enable_adaptive_verification=false "
            "in the speculative config, or use a backend that does."
        )


def _adaptive_refused_backend(plan: BootPlan) -> str | None:
    """The backend that cannot take device-decided query lengths (GDN layers, FlashInfer off SM100)."""
    setup = plan.spec.setup
    if not setup.adaptive:
        return None
    if setup.hybrid:
        return "GDNAttentionBackend"
    if plan.attention_backend == "FLASHINFER" and plan.settings.gpu_capability < 10.0:
        return "FlashInferBackend"
    return None


def _load(plan: BootPlan, core: VllmLog) -> None:
    settings = plan.settings
    core.info("gpu_model_runner.py:2602", f"Starting to load model {plan.args.model}...")
    if settings.fail == "hang":
        hang_forever()
    load = settings.load_wall_seconds
    if settings.fail == "crash":
        time.sleep(load / 2)
        raise EngineInitError("RuntimeError: CUDA error: unspecified launch failure")
    time.sleep(load)
    if settings.fail == "cuda-oom":
        raise EngineInitError(CUDA_OOM)
    core.info("default_loader.py:267", f"Loading weights took {load * 0.8:.2f} seconds")
    core.info(
        "gpu_model_runner.py:2653",
        f"Model loading took {gib(_weights_per_gpu(plan)):.4f} GiB and {load:.6f} seconds",
    )


def _weights_per_gpu(plan: BootPlan) -> int:
    return plan.settings.weights_bytes + (DRAFT_WEIGHTS_BYTES if plan.spec.has_draft_model else 0)


def _kv_budget(plan: BootPlan, core: VllmLog) -> tuple[kv.KvBudget, int]:
    settings, args = plan.settings, plan.args
    available = kv.available_bytes(
        args.kv_cache_memory_bytes,
        settings.gpu_memory_bytes,
        args.gpu_memory_utilization,
        _weights_per_gpu(plan),
        settings.activation_bytes,
    )
    if settings.fail == "no-kv-memory":
        available = 0
    budget = kv.KvBudget(available, settings.kv_bytes_per_token)
    max_len = args.max_model_len or plan.derived_max_len
    if max_len == -1:
        max_len = max(1, min(plan.derived_max_len, budget.tokens))
    if budget.available_bytes > 0:
        core.info("gpu_worker.py:298", f"Available KV cache memory: {gib(available):.2f} GiB")
    try:
        kv.check_fits(budget, max_len)
    except ValueError as err:
        raise EngineInitError(f"ValueError: {err}") from err
    core.info("kv_cache_utils.py:1087", f"GPU KV cache size: {budget.tokens:,} tokens")
    core.info(
        "kv_cache_utils.py:1091",
        f"Maximum concurrency for {max_len:,} tokens per request: {budget.concurrency(max_len):.2f}x",
    )
    return budget, max_len


def _start_engine(plan: BootPlan, core: VllmLog) -> tuple[kv.KvBudget, int]:
    """Run the engine start-up stages; return the KV budget and the max model length."""
    args, spec = plan.args, plan.spec
    core.info(
        "core.py:93",
        f"Initializing a V1 LLM engine (v{__version__}) with config: "
        f"model='{args.model}', speculative_config={args.speculative_config}, "
        f"tensor_parallel_size={args.tensor_parallel_size}, "
        f"served_model_name={plan.served_names[0]}",
    )
    if spec.setup.enabled:
        block = f", block_size={spec.setup.block_size}" if spec.setup.block_size else ""
        core.info(
            "speculative.py:501",
            f"Speculative decoding: method={spec.setup.method}, num_speculative_tokens={spec.setup.k}{block}",
        )
    started = time.monotonic()
    _device_checks(plan, core)
    _load(plan, core)
    budget, max_len = _kv_budget(plan, core)
    core.info(
        "core.py:210",
        f"init engine (profile, create kv cache, warmup model) took {time.monotonic() - started:.2f} seconds",
    )
    return budget, max_len


def _sleep_config(plan: BootPlan, budget: kv.KvBudget) -> SleepConfig:
    settings = plan.settings
    weights = _weights_per_gpu(plan)
    return SleepConfig(
        weights_bytes=weights,
        awake_bytes=weights + settings.activation_bytes + max(0, budget.available_bytes),
        residue_bytes=settings.sleep_residue_bytes,
        tensor_parallel=max(1, plan.args.tensor_parallel_size),
        pinned=settings.pinned,
        h2d_pinned=settings.h2d_pinned_bytes_per_s,
        h2d_pageable=settings.h2d_pageable_bytes_per_s,
        d2h_pinned=settings.d2h_pinned_bytes_per_s,
        d2h_pageable=settings.d2h_pageable_bytes_per_s,
        reload_bytes_per_s=settings.reload_bytes_per_s,
        fixed_seconds=settings.sleep_fixed_seconds,
    )


def _config_error(err: Exception) -> int:
    """The traceback of a configuration error raised before the engine starts; exit code 1."""
    if isinstance(err, ValidationError):
        last = f"pydantic_core._pydantic_core.ValidationError: {err.render()}"
    else:
        last = f"{type(err).__name__}: {err}"
    # uncaught in vLLM's API server process: Python prints it, without the log prefix
    print(traceback_text([("/usr/local/bin/vllm", 10, "<module>")], last), file=sys.stderr, flush=True)
    return 1


def run(args: argparse.Namespace, environ: dict[str, str] | None = None) -> int:
    """Boot and serve until SIGTERM; return the process exit code on failure."""
    api = VllmLog("APIServer")
    _install_signal_handlers(api)
    try:
        settings = Settings.from_env(os.environ if environ is None else environ)
        profile = resolve_profile(settings.profile, settings.profile_file, settings.batching)
    except (ValueError, OSError, KeyError) as err:
        print(f"vllm serve: simulator configuration error: {err}", file=sys.stderr, flush=True)
        return 2
    api.info("api_server.py:1839", f"vLLM API server version {__version__}")
    api.info("utils.py:233", f"non-default args: {_non_default_args(args)}")
    try:
        plan = plan_boot(args, settings, api)
    except (ValidationError, ValueError) as err:
        return _config_error(err)
    api.info("model.py:547", f"Resolved architecture: {model_config.architecture(plan.target_config)}")
    core = VllmLog("EngineCore_DP0")
    try:
        budget, max_len = _start_engine(plan, core)
    except EngineInitError as err:
        return report_engine_failure(err, api)
    metrics = Metrics(plan.served_names[0], plan.spec.setup.k if plan.spec.setup.enabled else 0)
    engine = Engine(
        profile,
        plan.spec.setup,
        metrics,
        settings.time_scale,
        settings.flip_rate,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        kv_tokens=budget.tokens,
    )
    engine.worker_error_on_first_request = plan.first_request_error
    sleep = None
    sleep_routes = settings.dev_mode and args.enable_sleep_mode
    sleep_cfg = _sleep_config(plan, budget)
    metrics.gpu_memory_bytes = [sleep_cfg.awake_bytes] * sleep_cfg.tensor_parallel
    if sleep_routes:
        sleep = SleepMode(
            engine, sleep_cfg, settings.fail, lambda s: time.sleep(settings.scaled(s)), core, api
        )
    state = ServerState(
        plan.served_names, args.model, max_len, plan.api_key, engine, metrics, api, sleep, int(time.time())
    )
    quiet = args.disable_access_log_for_endpoints
    state.quiet_paths = frozenset(p.strip() for p in (quiet or "").split(",") if p.strip())
    host = args.host or "0.0.0.0"
    server = make_server(host, args.port, state)
    api.info("api_server.py:1912", f"Starting vLLM server on http://{host}:{args.port}")
    api.info("launcher.py:37", "Available routes are:")
    for route in ROUTES + (SLEEP_ROUTES if sleep_routes else ()):
        api.info("launcher.py:45", f"Route: {route}")
    api.info("server.py:84", f"Started server process [{os.getpid()}]")
    api.info("on.py:48", "Waiting for application startup.")
    api.info("on.py:62", "Application startup complete.")
    if plan.crash_after is not None:
        schedule_crash(plan.crash_after, api)
    server.serve_forever(poll_interval=0.2)
    return 0
