"""GPU checks against a fake probe: count, compute capability, attention backend, memory."""

from __future__ import annotations

from pathlib import Path

from composer.capacity.model import release_budget
from composer.doctor import gpu_checks as gck
from composer.probes.gpu import GpuInfo, GpuProcess

from .fakes import GIB, FakeProbe, h100, make_stack, rtx4090
from .fakes import facts as variant_facts_of

FOUR_4090 = [rtx4090(i) for i in range(4)]
DRAFTLESS_DFLASH = """
[variants.d3]
extends = "baseline"
image = "dflash2"
[variants.d3.speculative]
method = "dflash"
draft_model = true
num_speculative_tokens = 7
"""


def facts(stack, gpus=FOUR_4090, reason=""):
    return gck.gather_gpu_facts(stack, FakeProbe(gpus, reason))


def test_gpu_count_ok_warn_fail(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    assert gck.check_gpu_count(stack, facts(stack)).status == "ok"
    five = make_stack(tmp_path, environ={"GPU_DEVICES": "0,1,2,3,4"})
    warn = gck.check_gpu_count(five, facts(five, [rtx4090(i) for i in range(5)]))
    assert warn.status == "warn" and "TP uses 4" in warn.detail
    short = gck.check_gpu_count(stack, facts(stack, FOUR_4090[:2]))
    assert short.status == "fail" and "GPU_DEVICES names 2, 3" in short.detail
    listed = make_stack(tmp_path, environ={"GPU_DEVICES": "0,1"})
    failed = gck.check_gpu_count(listed, facts(listed, reason="no probe"))
    assert failed.status == "fail" and "tensor_parallel_size is 4" in failed.detail
    everything = make_stack(tmp_path, environ={"GPU_DEVICES": "all"})
    too_few = gck.check_gpu_count(everything, facts(everything, FOUR_4090[:3]))
    assert too_few.status == "fail" and "3 GPU(s) visible" in too_few.detail


def test_gpu_checks_not_available_warn_or_demo_only(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    missing = gck.check_gpu_memory(stack, stack.variant("mtp"), facts(stack, [], reason="no nvidia-smi"))
    assert missing.status == "warn" and "not available: no nvidia-smi" in missing.detail
    demo = make_stack(tmp_path, environ={"GPU_DEVICES": "none"})
    for finding in (
        gck.check_gpu_count(demo, facts(demo)),
        gck.check_compute_capability(demo, variant_facts_of(demo, "mtp"), facts(demo)),
        gck.check_gpu_memory(demo, demo.variant("mtp"), facts(demo)),
    ):
        assert (finding.status, finding.detail) == ("ok", gck.DEMO_ONLY)


def test_compute_capability_fa2_on_ada_is_ok(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    found = gck.check_compute_capability(stack, variant_facts_of(stack, "dflash2"), facts(stack))
    assert found.status == "ok" and "SM 8.9" in found.detail and "FA2" in found.detail


def test_compute_capability_fa3_forced_on_ada_fails_and_passes_on_hopper(tmp_path: Path) -> None:
    toml = '[variants.mtp.env]\nVLLM_FLASH_ATTN_VERSION = "3"\n'
    stack = make_stack(tmp_path, toml)
    ada = gck.check_compute_capability(stack, variant_facts_of(stack, "mtp"), facts(stack))
    assert ada.status == "fail" and "Hopper-only" in ada.detail and "VLLM_FLASH_ATTN_VERSION" in ada.fix
    hopper = gck.check_compute_capability(
        stack, variant_facts_of(stack, "mtp"), facts(stack, [h100(i) for i in range(4)])
    )
    assert hopper.status == "ok" and "FA3" in hopper.detail
    assert (
        gck.check_compute_capability(stack, variant_facts_of(stack, "baseline"), facts(stack)).status == "ok"
    )


def test_compute_capability_warns_on_mixed_gpus_and_fails_before_ampere(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    mixed = gck.check_compute_capability(
        stack, variant_facts_of(stack, "mtp"), facts(stack, [*FOUR_4090[:3], h100(3)])
    )
    assert mixed.status == "warn"
    turing = [GpuInfo(i, "Tesla T4", (7, 5), 16 * GIB, 0, 16 * GIB) for i in range(4)]
    old = gck.check_compute_capability(stack, variant_facts_of(stack, "mtp"), facts(stack, turing))
    assert old.status == "fail" and "SM 7.5" in old.detail


def test_attention_backend_for_dflash_ok_warn_fail(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, DRAFTLESS_DFLASH)
    assert gck.check_attention_backend(stack, variant_facts_of(stack, "dflash2")).status == "ok"
    assert gck.check_attention_backend(stack, variant_facts_of(stack, "mtp")) is None
    inherited = gck.check_attention_backend(stack, variant_facts_of(stack, "d3"))
    assert inherited.status == "warn" and "explicitly" in inherited.detail
    causal = make_stack(tmp_path, '[variants.dflash2.speculative]\nattention_backend = "triton_attn"\n')
    failed = gck.check_attention_backend(causal, variant_facts_of(causal, "dflash2"))
    assert failed.status == "fail" and "non-causal" in failed.detail


def test_gpu_memory_fits_weights_share_and_kv(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, target_shards=[27 * GIB, 27 * GIB])
    found = gck.check_gpu_memory(stack, stack.variant("mtp"), facts(stack))
    assert found.status == "ok"
    assert "13.5 GiB weights + 7.0 GiB KV + 1.6 GiB activations = 22.1 GiB per GPU" in found.detail


def test_gpu_memory_warns_naming_the_processes_that_hold_memory(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, target_shards=[54 * GIB])
    busy = rtx4090(2, used_gib=10, processes=[GpuProcess(4242, "python3", 10 * GIB)])
    found = gck.check_gpu_memory(
        stack, stack.variant("mtp"), facts(stack, [*FOUR_4090[:2], busy, FOUR_4090[3]])
    )
    assert found.status == "warn"
    assert "GPU 2 has 14.0 GiB free" in found.detail and "python3 (pid 4242, 10.0 GiB)" in found.detail


def test_gpu_memory_fails_when_more_than_the_card_holds(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, environ={"KV_CACHE_MEMORY": "12GiB"}, target_shards=[54 * GIB])
    found = gck.check_gpu_memory(stack, stack.variant("mtp"), facts(stack))
    assert found.status == "fail" and "KV_CACHE_MEMORY" in found.fix


def test_gpu_memory_counts_the_drafter_share_per_draft_tp(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, target_shards=[54 * GIB], draft_shards=[4 * GIB])
    found = gck.check_gpu_memory(stack, stack.variant("dflash2"), facts(stack))
    assert found.status == "ok"
    assert "1.0 GiB draft weights (TP 4) + 4.5 GiB KV + 1.6 GiB activations = 20.6 GiB" in found.detail
    toml = "[variants.dflash2.speculative.extra]\ndraft_tensor_parallel_size = 1\n"
    single = make_stack(
        tmp_path, toml, environ={"KV_CACHE_MEMORY": "4GiB"}, target_shards=[54 * GIB], draft_shards=[4 * GIB]
    )
    busy = [rtx4090(i, used_gib=3) for i in range(4)]
    warn = gck.check_gpu_memory(single, single.variant("dflash2"), facts(single, busy))
    assert warn.status == "warn" and "4.0 GiB draft weights (TP 1)" in warn.detail
    assert "holders unknown" in warn.detail


def test_gpu_memory_with_unknown_weights_is_a_warn_that_says_so(tmp_path: Path) -> None:
    """Unknown weights never read as "ok ... needs 0.0 GiB weights"."""
    stack = make_stack(tmp_path)
    found = gck.check_gpu_memory(stack, stack.variant("baseline"), facts(stack))
    assert found.status == "warn"
    assert found.detail.startswith("cannot tell whether it fits: target weights unknown")
    assert "0.0 GiB weights" not in found.detail and "? weights" in found.detail
    assert "MODEL_DIR" in found.fix


def test_gpu_memory_with_unknown_draft_weights_warns_and_still_fails_what_cannot_fit(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, environ={"KV_CACHE_MEMORY": "4GiB"}, target_shards=[54 * GIB])
    found = gck.check_gpu_memory(stack, stack.variant("dflash2"), facts(stack))
    assert found.status == "warn" and "draft weights unknown" in found.detail
    assert "at least 19.1 GiB" in found.detail
    huge = make_stack(tmp_path / "huge", environ={"KV_CACHE_MEMORY": "30GiB"})
    failed = gck.check_gpu_memory(huge, huge.variant("mtp"), facts(huge))
    assert failed.status == "fail" and "target weights unknown" in failed.detail


def test_release_budget_is_known_only_with_the_weights(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, target_shards=[27 * GIB, 27 * GIB])
    need = int(13.5 * GIB) + 7 * GIB + 1_696_512_327  # weights + KV + activations
    assert release_budget(stack, stack.variant("mtp"), tuple(FOUR_4090[:2])) == {0: need, 1: need}
    unknown = make_stack(tmp_path / "unknown")
    assert release_budget(unknown, unknown.variant("mtp"), tuple(FOUR_4090)) is None


def test_device_list_naming_no_host_gpu_fails_count_without_crashing_the_rest(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, environ={"GPU_DEVICES": "4,5,6,7"})
    gpu_facts = facts(stack)
    count = gck.check_gpu_count(stack, gpu_facts)
    assert count.status == "fail" and "4, 5, 6, 7" in count.detail
    memory = gck.check_gpu_memory(stack, stack.variant("mtp"), gpu_facts)
    assert memory.status == "warn" and "none of GPU_DEVICES" in memory.detail
    assert gck.check_compute_capability(stack, variant_facts_of(stack, "mtp"), gpu_facts).status == "warn"
