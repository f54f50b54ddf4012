"""Each capacity formula against figures computed by hand."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from composer.capacity import figures as f
from composer.capacity import model
from composer.capacity.model import capacity_of, host_ram_asleep, variant_figures
from tests.doctor.fakes import GIB, FakeProbe, make_stack, rtx4090

ACT = f.ACTIVATIONS_PER_GPU


def test_weights_per_gpu_is_the_checkpoints_share_under_its_tp() -> None:
    assert f.weights_per_gpu(54 * GIB, 4) == 13 * GIB + GIB // 2  # 54 / 4 = 13.5 GiB
    assert f.weights_per_gpu(4 * GIB, 1) == 4 * GIB
    assert f.weights_per_gpu(None, 4) is None


def test_kv_cache_is_the_setting_else_what_the_utilization_leaves() -> None:
    # 24 GiB x 0.75 = 18 GiB; - 12 GiB weights - 2 GiB activations = 4 GiB
    assert f.kv_cache_per_gpu(None, 24 * GIB, 0.75, 12 * GIB, 2 * GIB) == 4 * GIB
    assert f.kv_cache_per_gpu(7 * GIB, 24 * GIB, 0.75, 12 * GIB, 2 * GIB) == 7 * GIB
    assert f.kv_cache_per_gpu(None, 24 * GIB, 0.5, 12 * GIB, 2 * GIB) == 0  # 12 - 14 < 0: none
    assert f.kv_cache_per_gpu(None, None, 0.75, 12 * GIB, 2 * GIB) is None
    assert f.kv_cache_per_gpu(None, 24 * GIB, 0.75, None, 2 * GIB) is None


def test_gpu_need_is_weights_plus_kv_plus_activations_and_unknown_spreads() -> None:
    assert f.gpu_need(12 * GIB, 4 * GIB, 2 * GIB) == 18 * GIB
    assert f.gpu_need(None, 4 * GIB, 2 * GIB) is None and f.gpu_need(12 * GIB, None, 2 * GIB) is None


def test_host_ram_for_sleepers() -> None:
    assert f.host_ram_of_sleeper(13 * GIB + GIB // 2, 4, 1) == 54 * GIB  # every rank's weights
    assert f.host_ram_of_sleeper(13 * GIB, 4, 2) == 0  # level 2 drops them
    assert f.host_ram_of_sleeper(None, 4, 2) == 0
    assert f.host_ram_of_sleeper(None, 4, 1) is None
    assert f.host_ram_for_sleepers([54 * GIB, 10 * GIB]) == 64 * GIB
    assert f.host_ram_for_sleepers([54 * GIB, None]) is None
    assert f.host_ram_for_sleepers([]) == 0
    assert f.gib(int(1.3 * GIB)) == "1.3 GiB" and f.gib(None) == "?"


def test_memory_utilization_is_read_from_the_extra_args_else_vllms_default(tmp_path: Path) -> None:
    variant = make_stack(tmp_path).variant("baseline")
    assert model.memory_utilization(variant) == 0.92
    assert model.memory_utilization(replace(variant, extra_args=("--gpu-memory-utilization=0.8",))) == 0.8
    spaced = replace(variant, extra_args=("--gpu-memory-utilization", "0.7"))
    assert model.memory_utilization(spaced) == 0.7


def test_a_variants_figures_from_its_checkpoint_and_settings(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, target_shards=[27 * GIB, 27 * GIB], draft_shards=[4 * GIB])
    mtp = variant_figures(stack, stack.variant("mtp"), 24 * GIB)
    assert mtp.weights.per_gpu == 13 * GIB + GIB // 2 and mtp.kv_cache == 7 * GIB
    assert mtp.need == 20 * GIB + GIB // 2 + ACT  # 13.5 + 7 GiB + activations
    dflash2 = variant_figures(stack, stack.variant("dflash2"), 24 * GIB)
    assert dflash2.weights.per_gpu == 14 * GIB + GIB // 2  # 13.5 + 4 / 4
    assert dflash2.weights.parts[1] == ("draft weights (TP 4)", GIB)
    configured = replace(stack.variant("dflash2"), weights_bytes=5 * GIB)  # weights_bytes wins
    assert variant_figures(stack, configured, 24 * GIB).weights.per_gpu == 5 * GIB
    by_share = replace(
        stack.variant("baseline"), kv_cache_memory=None, extra_args=("--gpu-memory-utilization=0.75",)
    )
    shared = variant_figures(stack, by_share, 24 * GIB)
    assert shared.kv_cache == 18 * GIB - (13 * GIB + GIB // 2) - ACT  # 24 x 0.75 - 13.5 - act
    assert shared.need == 18 * GIB and shared.kv_source == "gpu-memory-utilization 0.75"
    unknown = make_stack(tmp_path / "none")
    guessed = variant_figures(unknown, by_share, 24 * GIB)
    assert guessed.need is None and guessed.known_need == 18 * GIB  # at least 0.75 of the GPU


def test_the_stacks_capacity_and_the_host_ram_of_a_sleeper(tmp_path: Path) -> None:
    sleepy = '[stack]\nstandby = "sleep"\n'
    stack = make_stack(tmp_path, sleepy, target_shards=[54 * GIB], draft_shards=[4 * GIB])
    cap = capacity_of(stack, FakeProbe([rtx4090(i) for i in range(4)]), ["baseline", "mtp"])
    assert cap.gpu_memory == 24 * GIB and cap.gpu_source == "probed by fake"
    # every sleeper counts, not only the variants asked about: dflash2 holds 4 x (13.5 + 1) GiB
    assert {k: cap.host_ram[k] for k in ("baseline", "mtp", "dflash2")} == {
        "baseline": 54 * GIB,
        "mtp": 54 * GIB,
        "dflash2": 58 * GIB,
    }
    assert set(cap.host_ram) == set(stack.variants)
    assert cap.host_ram_for_sleepers == sum(cap.host_ram.values()) == (54 + 54 + 58 + 54 + 54 + 58) * GIB
    assert cap.residue == dict.fromkeys(stack.variants, stack.sleep_residue)
    data = cap.as_data()
    assert data["release_budget_bytes"] == {
        "baseline": cap.variants["baseline"].need,
        "mtp": cap.variants["mtp"].need,
    }
    assert host_ram_asleep(stack, "mtp") == 54 * GIB and host_ram_asleep(stack, "gone") is None
    level2 = replace(stack, sleep_level=2)
    assert host_ram_asleep(level2, "mtp") == 0
