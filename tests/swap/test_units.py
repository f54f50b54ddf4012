"""Pure tests: swap planning, log signatures, boot stages, the lock and preflight."""

from __future__ import annotations

import multiprocessing
import socket
import threading
import time
from dataclasses import replace

import pytest

from composer.doctor.preflight import check_api_key, check_mounts, port_is_free
from composer.engine import bootlog, diagnose
from composer.engine.containers import RunningVariant
from composer.errors import LockBusy
from composer.render.target import resolve_target
from composer.stack.load import load_stack
from composer.swap.lock import swap_lock
from composer.swap.swapper import plan_swap
from tests.conftest import REPO

SIM_LINES = {
    "uva-wsl2": "RuntimeError: UVA is not available",
    "no-kv-memory": "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
    "max-seq-len-does-not-fit": "ValueError: To serve at least one request with the model's max seq len (131072)",
    "memory-held-by-another-process": "Free memory on device (3.1/23.5 GiB) on startup is less than desired GPU memory utilization (0.92, 21.6 GiB).",
    "cuda-oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB.",
    "fa3-not-hopper": "Cannot use FA version 3 is not supported due to FA3 is only supported on devices with compute capability >= 8 excluding 8.6 and 8.9",
    "nccl-shm": "Error while creating shared memory segment /dev/shm/nccl-vlQ8Xs (size 9637888)",
    "unknown-speculative-method": "1 validation error for SpeculativeConfig\nmethod\n  Input should be 'ngram' [type=literal_error, input_value='foo', input_type=str]",
    "unsupported-architecture": "Model architectures ['FooForCausalLM'] are not supported for now. Supported architectures: dict_keys([...])",
    "max-model-len-too-large": "User-specified max_model_len (262144) is greater than the derived max_model_len (max_position_embeddings=131072 in model's config.json).",
}


def running(variant: str, config_hash: str) -> RunningVariant:
    return RunningVariant(
        "id", "p-vllm-1", variant, config_hash, "img", "running", None, None, 8000, "m", None, 0
    )


def test_plan_noop_only_when_same_variant_hash_and_ready():
    current = running("mtp", "abc")
    assert plan_swap("mtp", "abc", current, True).steps == ()
    assert plan_swap("mtp", "abc", current, False).steps == ("stop", "release", "start", "gate")
    assert plan_swap("mtp", "xyz", current, True).steps == ("stop", "release", "start", "gate")
    assert plan_swap("baseline", "abc", current, True).steps == ("stop", "release", "start", "gate")
    assert plan_swap("mtp", "abc", None, False).steps == ("start", "gate")


@pytest.mark.parametrize(("name", "line"), SIM_LINES.items())
def test_each_signature_matches_its_line_and_only_it(name, line):
    assert [s.name for s in diagnose.explain(line)] == [name]
    assert diagnose.hints(line)


def test_required_signatures_present():
    assert set(SIM_LINES) <= {s.name for s in diagnose.SIGNATURES}
    assert diagnose.explain("INFO all good") == []


def test_boot_stage_and_kv_tokens():
    log = "Loading weights took 1.2 seconds\nGPU KV cache size: 250,002 tokens\n"
    assert bootlog.boot_stage("") == "loading"
    assert bootlog.boot_stage(log) == "KV cache allocated"
    assert bootlog.boot_stage(log + "Application startup complete.") == "server ready"
    assert bootlog.kv_cache_tokens(log) == 250002
    assert bootlog.kv_cache_tokens("nothing") is None


def _hold_lock(project: str, held, release, directory) -> None:
    with swap_lock(project, directory=directory):
        held.set()
        release.wait(10)


@pytest.fixture
def lock_dir(tmp_path):
    """A private lock directory for one test."""
    return tmp_path / "locks"


@pytest.fixture
def lock_holder(lock_dir):
    """Another process holding the swap lock of project `p`; `release` lets it go."""
    ctx = multiprocessing.get_context("fork")
    held, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=("p", held, release, lock_dir))
    holder.start()
    assert held.wait(10)
    yield holder, release
    if holder.is_alive():  # setting the event waits for its sleepers: never for a killed one
        release.set()
        holder.join(5)


def test_lock_serialises_and_no_wait_fails(lock_holder, lock_dir):
    holder, release = lock_holder
    busy = f"another swap of project 'p' is running \\(pid {holder.pid}\\)"
    with pytest.raises(LockBusy, match=busy), swap_lock("p", wait=False, directory=lock_dir):
        pass
    threading.Timer(0.3, release.set).start()
    messages: list[str] = []
    began = time.monotonic()
    with swap_lock("p", wait=True, on_wait=messages.append, directory=lock_dir):
        waited = time.monotonic() - began
    assert waited >= 0.25
    assert messages == [f"waiting for another swap of project 'p' (pid {holder.pid}) to finish"]


def test_lock_released_when_holder_is_killed(lock_holder, lock_dir):
    holder, _ = lock_holder
    holder.kill()
    holder.join(5)
    with swap_lock("p", wait=False, directory=lock_dir):
        pass


def stack(**environ: str):
    return load_stack([REPO / "composer.toml"], env_file=None, environ=environ)


def test_api_key_checks():
    assert check_api_key(stack()).status == "fail"
    assert check_api_key(stack(VLLM_API_KEY="sk-123456")).status == "fail"
    assert check_api_key(stack(VLLM_API_KEY="sk-123456"), allow_weak=True).status == "warn"
    assert check_api_key(stack(VLLM_API_KEY="short-key")).status == "fail"
    assert check_api_key(stack(VLLM_API_KEY="short-key"), allow_weak=True).status == "warn"
    assert check_api_key(stack(VLLM_API_KEY="a" * 32)).status == "fail"  # repeated: about 9 bits
    assert check_api_key(stack(VLLM_API_KEY="sk-Jr4uW3dfZ7SWrbnsSTPMvSct")).status == "ok"


def test_mount_check_names_missing_dir(tmp_path):
    s = stack(MODEL_DIR=str(tmp_path), DRAFT_DIR=str(tmp_path / "missing"))
    assert [f.status for f in check_mounts(resolve_target(s, "baseline").spec.mounts)] == ["ok"]
    findings = check_mounts(resolve_target(s, "dflash2").spec.mounts)
    assert [f.status for f in findings] == ["ok", "fail"]
    assert "missing" in findings[1].detail and findings[1].fix == "set DRAFT_DIR to the checkpoint directory"


def test_port_is_free_detects_listener():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert not port_is_free("127.0.0.1", port)
    assert port_is_free("127.0.0.1", port)


def test_workload_mapping_defaults():
    s = stack()
    assert {w: s.workload_variant(w).name for w in s.workloads} == {
        "chat-1": "mtp",
        "long-16": "baseline",
    }
    assert replace(s.variant("mtp")).speculative.method == "mtp"


def test_redact_masks_the_key_everywhere():
    assert bootlog.redact("key=sk-abc; again sk-abc.", "sk-abc") == "key=********; again ********."
    assert bootlog.redact("nothing to hide", None) == "nothing to hide"
