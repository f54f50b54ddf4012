"""Doctor and the swap plan compute their capacity figures with one function."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from composer.capacity import model
from composer.capacity.model import release_budget
from composer.doctor.report import format_report, run_doctor
from composer.render.target import resolve_target
from composer.swap.gpu_release import ReleaseWait
from composer.swap.outcome import UpOptions, UpResult
from composer.swap.swapper import check_standby_fits, plan_swap
from composer.swap.transaction import Context
from tests.doctor.fakes import GIB, FakeProbe, make_stack, rtx4090
from tests.doctor.test_doctor import host
from tests.swap.test_standby_units import _running

SLEEPY = '[stack]\nstandby = "sleep"\n'
GPUS = [rtx4090(i) for i in range(4)]


def _both(tmp_path: Path, monkeypatch) -> tuple[dict, dict, dict]:
    """(doctor's JSON capacity, the plan's JSON capacity, the release wait's budget) for
    baseline replacing mtp on the same stack and the same GPUs."""
    stack = make_stack(
        tmp_path, SLEEPY, environ={"KV_CACHE_MEMORY": "4GiB"}, target_shards=[27 * GIB, 27 * GIB]
    )
    probe = FakeProbe(GPUS)
    monkeypatch.setattr("composer.probes.gpu.detect_probe", lambda: probe)
    monkeypatch.setattr("composer.capacity.inputs.host_memory", lambda: 512 * GIB)
    monkeypatch.setattr("composer.probes.cgroups.container_pids", lambda ids: frozenset())
    doctor = run_doctor(stack, "baseline", host(tmp_path, probe=probe)).to_json()["capacity"]
    target = resolve_target(stack, "baseline")
    plan = plan_swap("baseline", "h", _running("mtp"), True, current_sleeps=True)
    ctx = Context(stack, None, UpOptions())  # type: ignore[arg-type]
    planned = check_standby_fits(ctx, target, plan, UpResult("baseline", "x"), [])
    release = ReleaseWait.before_stop(stack, partial(release_budget, stack, target.variant), None, probe)
    assert (
        "\n  capacity: baseline per GPU: 13.5 GiB weights + 4.0 GiB KV cache" in planned.describe()
    )  # --dry-run
    return doctor, planned.as_data()["capacity"], release.budget or {}


def test_doctor_and_the_plan_print_the_same_figures(tmp_path: Path, monkeypatch) -> None:
    doctor, plan, budget = _both(tmp_path, monkeypatch)
    figures = dict(doctor["per_gpu"]["baseline"])
    assert figures.pop("sleep_residue_bytes") == 1_395_864_371
    assert plan["per_gpu"] == figures
    # 13.5 GiB weights + 4 GiB KV + activations, on each of the four GPUs
    need = 17 * GIB + GIB // 2 + 1_696_512_327
    assert plan["release_budget_bytes"] == doctor["release_budget_bytes"]["baseline"] == need
    assert budget == dict.fromkeys(range(4), need)
    assert plan["asleep_after"] == ["mtp"] and plan["fits"] is True
    assert plan["host_ram_for_sleepers_bytes"] == doctor["host_ram_for_sleepers_bytes"]["mtp"] == 54 * GIB


def test_a_changed_formula_changes_doctor_the_plan_and_the_release_wait_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = model.variant_figures
    calls: list[str] = []

    def heavier(stack, variant, gpu_total, weights=None):
        calls.append(variant.name)
        figures = real(stack, variant, gpu_total, weights)
        return model.VariantFigures(
            figures.variant, figures.weights, figures.kv_cache, figures.kv_source, 3 * GIB, figures.gpu_total
        )

    monkeypatch.setattr(model, "variant_figures", heavier)
    doctor, plan, budget = _both(tmp_path, monkeypatch)
    need = 17 * GIB + GIB // 2 + 3 * GIB
    assert (
        doctor["per_gpu"]["baseline"]["activations_bytes"] == plan["per_gpu"]["activations_bytes"] == 3 * GIB
    )
    assert doctor["release_budget_bytes"]["baseline"] == plan["release_budget_bytes"] == need
    assert budget == dict.fromkeys(range(4), need)
    assert calls.count("baseline") >= 3  # doctor's check and section, the plan, the release wait


def test_doctor_prints_the_figures_as_text(tmp_path: Path, monkeypatch) -> None:
    stack = make_stack(tmp_path, SLEEPY, target_shards=[54 * GIB])
    monkeypatch.setattr("composer.capacity.inputs.host_memory", lambda: 512 * GIB)
    text = format_report(run_doctor(stack, "mtp", host(tmp_path, probe=FakeProbe(GPUS))))
    assert "capacity per GPU of 24.0 GiB (probed by the GPU probe):" in text
    assert (
        "  mtp: 13.5 GiB weights + 7.0 GiB KV cache (kv_cache_memory) + 1.6 GiB activations = 22.1 GiB "
        "(release budget); 1.3 GiB sleep residue while asleep"
    ) in text
    assert (
        "  host RAM for sleepers (level 1): baseline 54.0 GiB, mtp 54.0 GiB, dflash2 ?, mtp-dsd 54.0 GiB, "
        "mtp-adaptive 54.0 GiB, dflash2-adaptive ? = ? of the host's 512.0 GiB"
    ) in text  # dflash2's draft checkpoint has no weights here: unknown, never a guess
