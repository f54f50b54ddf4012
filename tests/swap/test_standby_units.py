"""Sleep standby without Docker: settings, rendering, swap plans and the memory planner."""

from __future__ import annotations

import pytest

from composer.capacity.figures import GIB
from composer.capacity.standby import Awake, Sleeper, plan_standby
from composer.engine.containers import RunningVariant
from composer.errors import ConfigError
from composer.render.target import resolve_target
from composer.stack.load import load_stack
from composer.swap.swapper import plan_swap
from tests.conftest import REPO

BASE = REPO / "composer.toml"


def _stack(*flags: str):
    return load_stack([BASE], REPO / ".env.demo", environ={}, flags=list(flags))


def _running(variant: str, config_hash: str = "h") -> RunningVariant:
    return RunningVariant(
        "id", "p-vllm-1", variant, config_hash, "img", "running", None, None, 8000, "m", None, 0
    )


def test_standby_defaults_to_stop_and_the_stack_default_reaches_every_variant() -> None:
    assert {v.standby for v in _stack().variants.values()} == {"stop"}
    stack = _stack("stack.standby=sleep", "variants.baseline.standby=stop")
    assert stack.variants["mtp"].standby == "sleep" and stack.variants["baseline"].standby == "stop"


def test_bad_standby_values_are_refused_with_the_allowed_ones() -> None:
    with pytest.raises(ConfigError, match="expected one of stop, sleep"):
        _stack("variants.mtp.standby=nap")
    with pytest.raises(ConfigError, match="needs the gateway"):
        _stack("variants.mtp.standby=sleep", "gateway.enabled=false")
    with pytest.raises(ConfigError, match="from 0 to 1"):
        _stack("stack.acceptance_floor=2")


def test_a_sleep_variant_renders_sleep_mode_dev_routes_and_its_own_service() -> None:
    stop = resolve_target(_stack(), "mtp").spec
    sleep = resolve_target(_stack("variants.mtp.standby=sleep"), "mtp").spec
    assert "--enable-sleep-mode" not in [p for arg in stop.command for p in arg]
    assert ("--enable-sleep-mode",) in sleep.command
    assert dict(sleep.environment)["VLLM_SERVER_DEV_MODE"] == "1"
    assert "VLLM_SERVER_DEV_MODE" not in dict(stop.environment)
    assert (stop.compose_service, sleep.compose_service) == ("vllm", "vllm-mtp")
    assert sleep.container_name.endswith("-vllm-mtp-1") and stop.hash != sleep.hash


def test_plans_sleep_the_serving_sleep_variant_and_wake_a_sleeping_target() -> None:
    current = _running("mtp")
    assert plan_swap("baseline", "b", current, True, current_sleeps=True).steps == ("sleep", "start", "gate")
    assert plan_swap("baseline", "b", current, True, current_sleeps=True, target_asleep=True).steps == (
        "sleep",
        "wake",
        "gate",
    )
    assert plan_swap("baseline", "b", current, True, target_asleep=True).steps == (
        "stop",
        "release",
        "wake",
        "gate",
    )
    # the same variant with a new configuration is replaced, never put to sleep next to itself
    assert plan_swap("mtp", "new", current, True, current_sleeps=True).steps[0] == "stop"


def test_the_planner_refuses_a_third_sleeper_that_does_not_fit_with_the_numbers() -> None:
    awake = Awake("dflash2", weights=int(13.5 * GIB), kv_cache=int(4.5 * GIB), activations=int(1.58 * GIB))
    two = [Sleeper("mtp", int(13.5 * GIB)), Sleeper("baseline", int(13.5 * GIB))]
    common = {"residue": int(1.3 * GIB), "tensor_parallel": 4, "host_memory": 256 * GIB}
    fits = plan_standby(awake, two, gpu_memory=24 * GIB, **common)
    assert fits.fits and fits.costs[0] == "standby of mtp costs 1.3 GiB per GPU"
    three = [*two, Sleeper("eagle", int(13.5 * GIB))]
    refused = plan_standby(awake, three, gpu_memory=23 * GIB, **common)
    assert not refused.fits
    assert "3 x 1.3 GiB" in refused.problems[0] and "above the GPU's 23.0 GiB" in refused.problems[0]
    host = plan_standby(awake, three, gpu_memory=None, **{**common, "host_memory": 128 * GIB})
    assert not host.fits and "hold 162.0 GiB of weights" in host.problems[0]
    assert any("GPU fit not checked" in n for n in host.notes)


def test_the_planner_says_what_it_could_not_check() -> None:
    awake = Awake("baseline", weights=None, kv_cache=None, activations=0)
    plan = plan_standby(
        awake, [Sleeper("mtp", None)], residue=GIB, tensor_parallel=1, gpu_memory=24 * GIB, host_memory=GIB
    )
    assert plan.fits and len(plan.notes) == 2
    assert plan_standby(awake, [], residue=GIB, tensor_parallel=1, gpu_memory=1, host_memory=1).costs == []


def test_acceptance_counters_are_read_from_a_metrics_text() -> None:
    from composer.swap.standby import spec_counters

    text = (
        "# TYPE vllm:spec_decode_num_draft_tokens counter\n"
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 70.0\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="1"} 7.0\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 30.0\n'
    )
    assert spec_counters(text) == (77.0, 30.0)
    assert spec_counters("# nothing\n") == (0.0, 0.0)


def test_weights_come_from_the_setting_else_from_the_checkpoint_headers(tmp_path) -> None:
    import json
    import struct
    from dataclasses import replace

    from composer.capacity.model import variant_weights

    def weights_per_gpu(stack, variant):
        return variant_weights(stack, variant).per_gpu

    header = json.dumps(
        {"w": {"dtype": "BF16", "shape": [1024, 1024], "data_offsets": [0, 2 << 20]}}
    ).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    stack = _stack()
    stack = replace(stack, model_dir=str(tmp_path), tensor_parallel_size=2)
    assert weights_per_gpu(stack, stack.variants["baseline"]) == (2 << 20) // 2
    configured = replace(stack.variants["baseline"], weights_bytes=5 * GIB)
    assert weights_per_gpu(stack, configured) == 5 * GIB
    assert (
        weights_per_gpu(replace(stack, model_dir=str(tmp_path / "none")), stack.variants["baseline"]) is None
    )


def test_status_says_waking_while_the_gateway_runs_a_wake(monkeypatch) -> None:
    from composer.swap import snapshot, status

    running = {"project": "p", "running": True, "variant": "mtp", "health": "not ready", "health_detail": "x"}
    monkeypatch.setattr(snapshot, "take", lambda stack, client, **_: snapshot.Snapshot("p", ()))
    monkeypatch.setattr(status, "_variant_status", lambda stack, snap: dict(running))
    gateway = {"container": "p-gateway-1", "state": "running", "backend_ready": False, "held": 3}
    gateway.update(inflight=0, holds=1, waking=True)
    monkeypatch.setattr(status, "gateway_status", lambda stack, snap: dict(gateway))
    data = status.status_data(_stack(), None)
    assert data["health"] == "waking" and "waking from sleep" in data["health_detail"]
    assert "backend waking from sleep" in status._gateway_line(data["gateway"])
    monkeypatch.setattr(status, "gateway_status", lambda stack, snap: {**gateway, "waking": False})
    assert status.status_data(_stack(), None)["health"] == "not ready"
