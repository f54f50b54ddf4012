"""The doctor run as a whole: report schema, resilience without Docker, the fast subset."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer.doctor.report import (
    CHECK_NAMES,
    SCHEMA_VERSION,
    Host,
    Report,
    fast_checks,
    format_report,
    run_doctor,
)
from composer.engine.client import compose_version, docker_client
from composer.errors import DockerUnavailable
from composer.render.target import resolve_target

from .fakes import GIB, FakeProbe, make_stack, rtx4090

WSL2 = "6.6.114.1-microsoft-standard-WSL2"


def unreachable():
    raise DockerUnavailable("cannot reach the Docker engine at unix:///nowhere")


def host(tmp_path: Path, probe=None, client_factory=unreachable, release: str = WSL2) -> Host:
    return Host(
        env_file=tmp_path / ".env",
        kernel_release=release,
        probe=probe or FakeProbe([rtx4090(i) for i in range(4)]),
        client_factory=client_factory,
        compose_version=lambda: "2.40.3",
    )


def test_without_docker_the_other_checks_still_run(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, target_shards=[54 * GIB], draft_shards=[4 * GIB])
    report = run_doctor(stack, None, host(tmp_path))
    by_name = {(c.name, c.variant): c for c in report.checks}
    assert by_name[("docker-engine", None)].status == "fail"
    assert ("image", "mtp") not in by_name
    assert by_name[("gpu-memory", "dflash2")].status == "ok"
    assert by_name[("wsl2-pin-memory", "dflash2")].status == "ok"
    assert by_name[("mtp-layers", "mtp")].status == "ok"
    assert {c.name for c in report.checks} <= set(CHECK_NAMES)


def test_one_variant_limits_the_variant_checks(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    report = run_doctor(stack, "baseline", host(tmp_path))
    assert report.variant == "baseline"
    assert {c.variant for c in report.checks} == {None, "baseline"}


def test_json_schema_is_stable(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    data = run_doctor(stack, "mtp", host(tmp_path, probe=FakeProbe(reason="no nvidia-smi"))).to_json()
    assert list(data) == ["schema", "variant", "checks", "summary", "capacity"]
    assert list(data["capacity"]) == [
        "gpu_memory_bytes",
        "gpu_memory_from",
        "per_gpu",
        "release_budget_bytes",
        "host_ram_for_sleepers_bytes",
        "host_memory_bytes",
        "sleep_level",
    ]
    assert list(data["capacity"]["per_gpu"]["mtp"]) == [
        "weights_bytes",
        "kv_cache_bytes",
        "kv_cache_from",
        "activations_bytes",
        "need_bytes",
        "sleep_residue_bytes",
    ]
    assert data["schema"] == SCHEMA_VERSION == 1 and data["variant"] == "mtp"
    for check in data["checks"]:
        assert list(check) == ["name", "status", "detail", "fix", "variant"]
        assert check["status"] in {"ok", "warn", "fail"} and check["variant"] in {None, "mtp"}
        assert isinstance(check["detail"], str) and isinstance(check["fix"], str)
    assert list(data["summary"]) == ["ok", "warn", "fail"]
    assert sum(data["summary"].values()) == len(data["checks"])
    gpu = [c for c in data["checks"] if c["name"] in {"gpu-count", "compute-capability", "gpu-memory"}]
    assert gpu and all(c["status"] == "warn" and "not available" in c["detail"] for c in gpu)


def test_format_report_shows_fixes_and_counts() -> None:
    from composer.doctor.preflight import Finding

    report = Report(
        None, (Finding("port", "fail", "in use", "choose another port"), Finding("api-key", "ok", "set"))
    )
    text = format_report(report)
    assert "fail  port: in use\n      fix: choose another port" in text
    assert text.endswith("1 ok, 0 warn, 1 fail")


@pytest.mark.docker
def test_full_run_against_the_real_daemon(tmp_path: Path, scratch_image: str) -> None:
    stack = make_stack(tmp_path, environ={"VLLM_IMAGE": scratch_image, "DFLASH2_IMAGE": scratch_image})
    report = run_doctor(
        stack, None, host(tmp_path, client_factory=lambda: docker_client(timeout=30), release="6.8.0")
    )
    statuses = {(c.name, c.variant): c.status for c in report.checks}
    assert statuses[("docker-engine", None)] == "ok"
    assert statuses[("image", "dflash2")] == "ok"
    assert statuses[("port", None)] == "ok"
    assert compose_version()


def test_fast_checks_skip_gpu_probing_and_image_inspection(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    found = fast_checks(stack, resolve_target(stack, "dflash2"), None, kernel_release=WSL2)
    names = [f.name for f in found]
    assert names == [
        "api-key",
        "port",
        "client-address",
        "bind-address",
        "hold-timeout",
        "mounts",
        "mounts",
        "attention-backend",
        "wsl2-pin-memory",
        "draft-config",
        "draft-k",
    ]
    assert not any(f.failed for f in found)
    assert {getattr(f, "variant", None) for f in found} == {None, "dflash2"}


def test_fast_checks_fail_on_weak_key_unless_allowed(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, environ={"VLLM_API_KEY": "sk-123456"})
    assert fast_checks(stack, resolve_target(stack, "mtp"), None, kernel_release="6.8.0")[0].status == "fail"
    allowed = fast_checks(
        stack, resolve_target(stack, "mtp"), None, allow_weak_key=True, kernel_release="6.8.0"
    )
    assert allowed[0].status == "warn"


def test_fast_checks_fail_when_the_draft_dir_is_missing(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, draft=None)
    found = {
        (f.name, f.status)
        for f in fast_checks(stack, resolve_target(stack, "dflash2"), None, kernel_release=WSL2)
    }
    assert ("mounts", "fail") in found and ("draft-config", "fail") in found
    assert ("mounts", "ok") in found


def test_identical_findings_are_printed_once_with_the_checks_they_cover() -> None:
    from composer.doctor.preflight import Finding
    from composer.doctor.report import Report, format_report

    gpu = ("warn", "GPU facts not available: no NVML", "install the driver")
    report = Report(
        None,
        (
            Finding("gpu-count", *gpu),
            Finding("api-key", "ok", "VLLM_API_KEY is set"),
            *(
                Finding(name, *gpu, variant=v)
                for v in ("baseline", "mtp")
                for name in ("compute-capability", "gpu-memory")
            ),
        ),
    )
    lines = format_report(report).splitlines()
    assert lines[0] == (
        "warn  gpu-count, compute-capability [baseline, mtp], gpu-memory [baseline, mtp]: "
        "GPU facts not available: no NVML"
    )
    assert sum("GPU facts not available" in line for line in lines) == 1
    assert lines[-1] == "1 ok, 5 warn, 0 fail"
