"""Which engine is in use, and the checks that change when it is on another machine."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from composer.doctor.remote_checks import check_client_address, check_endpoint, mount_checks, port_check
from composer.doctor.report import variant_facts
from composer.engine import client as engine_client
from composer.engine.client import Endpoint
from composer.engine.health import base_url
from composer.render.target import resolve_target
from composer.stack.load import load_stack
from tests.conftest import REPO

SSH = Endpoint("gpu-box", "ssh://ops@gpu-box.lan")


@pytest.fixture
def stack(tmp_path: Path):
    env = tmp_path / "empty.env"
    env.write_text("")
    return load_stack([REPO / "composer.toml"], env, environ={})


def test_endpoints_tell_local_sockets_from_remote_hosts() -> None:
    assert not Endpoint(None, "unix:///var/run/docker.sock").remote
    assert Endpoint(None, "unix:///var/run/docker.sock").address is None
    assert SSH.remote and SSH.address == "gpu-box.lan"
    assert Endpoint("x", "tcp://10.0.0.5:2376").address == "10.0.0.5"


def test_the_gate_and_clients_use_the_remote_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_client, "engine_endpoint", lambda: SSH)
    assert base_url("0.0.0.0", 8000) == "http://gpu-box.lan:8000"
    assert base_url("10.1.2.3", 8000) == "http://10.1.2.3:8000"
    monkeypatch.setattr(engine_client, "engine_endpoint", lambda: Endpoint(None, "unix:///x.sock"))
    assert base_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"


def test_a_remote_loopback_port_fails_with_the_fix(stack, monkeypatch: pytest.MonkeyPatch) -> None:
    finding = check_client_address(stack, SSH)
    assert finding.status == "fail" and "gpu-box.lan's loopback" in finding.detail
    assert "VLLM_BIND_ADDRESS" in finding.fix
    monkeypatch.setattr(engine_client, "engine_endpoint", lambda: SSH)
    finding = check_client_address(replace(stack, bind_address="0.0.0.0"), SSH)
    assert finding.status == "ok" and finding.detail == "clients use http://gpu-box.lan:8000"
    assert check_endpoint(SSH).detail.endswith("(remote: host paths and ports are on gpu-box.lan)")


def test_remote_checks_never_read_this_machine(stack) -> None:
    target = variant_facts(resolve_target(stack, "mtp"))  # MODEL_DIR does not exist here
    (local,) = mount_checks(target, None, Endpoint(None, "unix:///x.sock"))
    assert local.status == "fail" and "does not exist" in local.detail
    (remote,) = mount_checks(target, None, SSH)
    assert remote.status == "warn" and "not reachable" in remote.detail


class _Container:
    def __init__(self, name: str, port: int, labels: dict[str, str]) -> None:
        self.name, self.labels = name, labels
        self.attrs = {
            "NetworkSettings": {"Ports": {"8000/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(port)}]}}
        }


class _Client:
    def __init__(self, containers: list[_Container]) -> None:
        self.containers = self
        self._list = containers

    def list(self, all: bool = False, filters: dict | None = None) -> list[_Container]:
        return [] if filters else self._list  # filtered: the gateway, which these tests have not


def test_the_port_is_checked_among_the_remote_engines_containers(stack) -> None:
    assert port_check(stack, _Client([]), SSH).status == "ok"
    theirs = port_check(stack, _Client([_Container("web", stack.port, {})]), SSH)
    assert theirs.status == "fail" and "published by container web" in theirs.detail
    ours = _Container("vllm-vllm-1", stack.port, {"vllm-composer.variant": "mtp"})
    assert "held by our variant" in port_check(stack, _Client([ours]), SSH).detail
