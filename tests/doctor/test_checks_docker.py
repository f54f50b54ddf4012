"""Docker checks against the real daemon, plus the pure classifications of what it reports."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import pytest

from composer import labels as label_names
from composer.doctor import engine_checks as dck
from composer.doctor.preflight import check_image, check_port
from composer.engine.client import compose_version, docker_client
from tests.doctor.fakes import facts

from .fakes import make_stack

SIM_IMAGE = "vllm-sim:latest"


@pytest.mark.docker
def test_engine_reachable_reports_its_version() -> None:
    found, client = dck.check_engine(lambda: docker_client(timeout=30))
    assert found.status == "ok" and "Docker Engine" in found.detail
    assert client is not None
    client.close()


def test_engine_unreachable_fails_with_the_fix(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    found, client = dck.check_engine(lambda: docker_client(timeout=5))
    assert (found.status, client) == ("fail", None)
    assert "make docker" in found.fix


def test_old_engine_warns() -> None:
    assert dck.engine_finding("18.09.7").status == "warn"
    assert dck.engine_finding("20.10.24+dfsg1").status == "ok"
    assert dck.engine_finding("20.10.24+dfsg1", "6.1.0-28-amd64").status == "ok"
    old_kernel = dck.engine_finding("20.10.24+dfsg1", "4.18.0-553.el8_10.x86_64")
    assert old_kernel.status == "fail" and "older than 5.14" in old_kernel.detail
    assert "gateway.enabled = false" in old_kernel.fix
    assert dck.engine_finding("20.10.24+dfsg1", "4.18.0", gateway=False).status == "ok"


@pytest.mark.docker
def test_compose_plugin_ok_missing_and_old(tmp_path: Path, monkeypatch) -> None:
    assert dck.check_compose(compose_version).status == "ok"
    assert dck.check_compose(lambda: "1.29.2").status == "warn"
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = dck.check_compose(compose_version)
    assert missing.status == "fail" and "docker CLI" in missing.detail


@pytest.mark.docker
def test_nvidia_runtime_from_the_real_engine(docker_client, tmp_path: Path) -> None:
    demo = make_stack(tmp_path, environ={"GPU_DEVICES": "none"})
    assert dck.check_nvidia_runtime(demo, docker_client).detail == dck.DEMO_ONLY
    gpu_stack = make_stack(tmp_path)
    found = dck.check_nvidia_runtime(gpu_stack, docker_client)
    has_nvidia = "nvidia" in (docker_client.info().get("Runtimes") or {})
    assert found.status == "ok" if has_nvidia else found.status in {"warn", "fail"}


def test_nvidia_runtime_classification() -> None:
    assert dck.nvidia_runtime_finding(["runc", "nvidia"], True, False).status == "ok"
    assert dck.nvidia_runtime_finding(["runc"], True, True).status == "warn"
    failed = dck.nvidia_runtime_finding(["runc"], True, False)
    assert failed.status == "fail" and "nvidia-ctk" in failed.fix
    assert dck.nvidia_runtime_finding(["runc"], False, False).status == "ok"


@pytest.mark.docker
def test_variant_image_present_or_missing(docker_client, scratch_image: str, tmp_path: Path) -> None:
    present = make_stack(tmp_path, environ={"VLLM_IMAGE": scratch_image})
    assert check_image(docker_client, facts(present, "mtp").image).status == "ok"
    absent = make_stack(tmp_path, environ={"DFLASH2_IMAGE": f"vct-missing-{uuid.uuid4().hex[:8]}:x"})
    found = check_image(docker_client, facts(absent, "dflash2").image)
    assert found.status == "fail" and "never pulled" in found.detail


@pytest.mark.docker
def test_port_free_foreign_or_held_by_our_container(docker_client, tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    assert check_port(stack, docker_client).status == "ok"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", stack.port))
        holder.listen()
        assert check_port(stack, docker_client).status == "fail"
        if not docker_client.images.list(name=SIM_IMAGE):
            pytest.skip(f"{SIM_IMAGE} is not built (make image-sim): 'held by our container' not checked")
        labels = {
            label_names.PORT: str(stack.port),
            label_names.VARIANT: "mtp",
            label_names.COMPOSE_PROJECT: stack.project,
            label_names.COMPOSE_SERVICE: stack.service,
            "vllm-composer.test": "doctor",
        }
        container = docker_client.containers.run(
            SIM_IMAGE, entrypoint=["sleep", "30"], labels=labels, detach=True, network_mode="none"
        )
        try:
            found = check_port(stack, docker_client)
            assert found.status == "ok" and "our mtp container" in found.detail
        finally:
            container.remove(force=True)


@pytest.mark.docker
def test_port_held_by_another_projects_container_is_refused(docker_client, tmp_path: Path) -> None:
    """Only this project's container counts as ours: another compose-spec project's variant
    container publishing the port makes preflight fail, naming that project."""
    if not docker_client.images.list(name=SIM_IMAGE):
        pytest.fail(f"{SIM_IMAGE} is not built: run `make image-sim`")
    stack = make_stack(tmp_path)
    other = f"vct{uuid.uuid4().hex[:10]}"
    labels = {
        label_names.PORT: str(stack.port),
        label_names.VARIANT: "baseline",
        label_names.COMPOSE_PROJECT: other,
        label_names.COMPOSE_SERVICE: stack.service,
        "vllm-composer.test": "doctor",
    }
    container = docker_client.containers.run(
        SIM_IMAGE,
        entrypoint=["sleep", "60"],
        labels=labels,
        detach=True,
        ports={"8000/tcp": ("127.0.0.1", stack.port)},
        name=f"{other}-{stack.service}-1",
    )
    try:
        found = check_port(stack, docker_client)
        assert found.status == "fail", found
        assert f"compose project {other!r}" in found.detail and f"project {stack.project!r}" in found.detail
        assert "choose another port" in found.fix
    finally:
        container.remove(force=True)


def _proc(tmp_path: Path, *commands: list[str]) -> Path:
    """A fake /proc with one process per command line."""
    proc = tmp_path / "proc"
    for pid, argv in enumerate(commands, start=100):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes("\0".join(argv).encode() + b"\0")
    (proc / "self").mkdir(parents=True, exist_ok=True)
    return proc


PROXY_8000 = ["/usr/sbin/docker-proxy", "-proto", "tcp", "-host-ip", "127.0.0.1", "-host-port", "8000"]


def test_a_port_behind_the_userland_proxy_gets_the_exact_daemon_json_change(tmp_path: Path) -> None:
    daemon_json = tmp_path / "daemon.json"
    daemon_json.write_text('{"log-driver": "local"}')
    facts = dck.read_proxy_facts(_proc(tmp_path, ["dockerd", "-H", "fd://"], PROXY_8000), daemon_json)
    assert facts.dockerd_seen and facts.flag is None and facts.proxied_ports == {8000}
    found = dck.userland_proxy_finding(8000, facts, daemon_json)
    assert found is not None and found.status == "warn"
    assert "port 8000 is published through docker-proxy" in found.detail
    assert f'write {{"log-driver": "local", "userland-proxy": false}} to {daemon_json}' in found.fix
    assert "restart dockerd" in found.fix


@pytest.mark.parametrize(
    ("argv", "config", "expected"),
    [
        (["dockerd", "--userland-proxy=false"], None, "ok"),
        (["dockerd", "--userland-proxy", "false"], None, "ok"),
        (["dockerd"], '{"userland-proxy": false}', "ok"),
        (["dockerd"], None, "warn"),  # the engine's default is the proxy
        (["dockerd"], "not json", "warn"),
        (["dockerd", "--userland-proxy=true"], '{"userland-proxy": false}', "warn"),
        (["containerd"], None, None),  # no local engine seen: nothing to say
    ],
)
def test_the_userland_proxy_setting_is_read_from_dockerd_and_daemon_json(
    tmp_path: Path, argv: list[str], config: str | None, expected: str | None
) -> None:
    daemon_json = tmp_path / "daemon.json"
    if config is not None:
        daemon_json.write_text(config)
    found = dck.userland_proxy_finding(8000, dck.read_proxy_facts(_proc(tmp_path, argv), daemon_json))
    assert (found.status if found else None) == expected
    if expected == "warn":
        assert "--userland-proxy=false" in found.fix or '"userland-proxy": false' in found.fix


@pytest.mark.parametrize(
    ("info", "gateway", "expected"),
    [
        ({"LiveRestoreEnabled": True}, True, "ok"),
        ({"LiveRestoreEnabled": False}, True, "warn"),
        ({}, True, "warn"),
        ({}, False, None),
    ],
)
def test_a_daemon_restart_that_stops_the_stack_is_a_warning_with_the_setting_that_keeps_it(
    info: dict, gateway: bool, expected: str | None
) -> None:
    found = dck.live_restore_finding(info, gateway)
    assert (found.status if found else None) == expected
    if expected == "warn":
        assert "port holder" in found.detail and '"live-restore": true' in found.fix
