"""Preflight rules that refuse before anything stops: weak keys, K beyond what vLLM and the
checkpoint accept, a bind address that is not this host's; and the warning for a port
published beyond loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer.doctor.preflight import check_api_key, check_bind_address, check_port
from composer.doctor.report import fast_checks
from composer.render.target import resolve_target
from composer.stack.keys import MIN_KEY_BITS

from .fakes import make_stack


def _failed(stack, variant: str) -> dict[str, str]:
    found = fast_checks(stack, resolve_target(stack, variant), None, kernel_release="6.8.0")
    return {f.name: f.detail for f in found if f.failed}


# -- 28. keys too easy to guess (issue 22: under 64 bits of estimated entropy) -------------------
@pytest.mark.parametrize("key", ["Q", "Zq9" * 5, "changeme-changeme", "0123456789abcdef"])
def test_weak_api_key_is_refused_unless_allowed(tmp_path: Path, key: str) -> None:
    stack = make_stack(tmp_path, environ={"VLLM_API_KEY": key})
    found = check_api_key(stack)
    assert found.status == "fail" and f"at least {MIN_KEY_BITS} bits are required" in found.detail
    assert "--allow-weak-key" in found.fix and key not in found.detail + found.fix
    assert "api-key" in _failed(stack, "baseline")
    assert check_api_key(stack, allow_weak=True).status == "warn"
    allowed = fast_checks(stack, resolve_target(stack, "baseline"), None, allow_weak_key=True)
    assert not [f for f in allowed if f.failed and f.name == "api-key"]


def test_random_key_of_twenty_characters_passes(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, environ={"VLLM_API_KEY": "q7ZtR2vX9mKp4WnB8sLd"})
    assert check_api_key(stack).status == "ok"


# -- 28. a port published beyond loopback ----------------------------------------------------
@pytest.mark.parametrize(("address", "status"), [("127.0.0.1", "ok"), ("127.0.0.2", "ok"), ("::1", "ok")])
def test_loopback_bind_address_is_ok(tmp_path: Path, address: str, status: str) -> None:
    stack = make_stack(tmp_path, environ={"VLLM_BIND_ADDRESS": address})
    assert check_bind_address(stack).status == status


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "192.0.2.10"])
def test_port_published_beyond_loopback_warns(tmp_path: Path, address: str) -> None:
    stack = make_stack(tmp_path, environ={"VLLM_BIND_ADDRESS": address})
    found = check_bind_address(stack)
    assert found.status == "warn" and "beyond loopback" in found.detail and "127.0.0.1" in found.fix
    names = [f.name for f in fast_checks(stack, resolve_target(stack, "baseline"), None)]
    assert "bind-address" in names


def test_bind_address_not_on_this_host_fails_the_port_check(tmp_path: Path) -> None:
    """Docker could not publish there either; before, the bind error was a traceback."""
    stack = make_stack(tmp_path, environ={"VLLM_BIND_ADDRESS": "192.0.2.10"})
    found = check_port(stack, None)
    assert found.status == "fail" and "not an address of this host" in found.detail


# -- 26. K bounded by what vLLM accepts for the method and the checkpoint ------------------------
def test_mtp_k_vllm_refuses_fails_preflight(tmp_path: Path) -> None:
    stack = make_stack(
        tmp_path,
        environ={"NUM_SPECULATIVE_TOKENS": "7"},
        target={"text_config": {"mtp_num_hidden_layers": 2}},
    )
    assert "must be divisible by n_predict=2" in _failed(stack, "mtp")["mtp-layers"]


def test_dflash_k_beyond_the_trained_block_fails_preflight(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, environ={"NUM_SPECULATIVE_TOKENS": "8"})
    assert "block_size 8 allows K up to 7" in _failed(stack, "dflash2")["draft-k"]
    at_block = make_stack(tmp_path / "k7", environ={"NUM_SPECULATIVE_TOKENS": "7"})
    assert "draft-k" not in _failed(at_block, "dflash2")


class _Held:
    """A running container of this project labelled with the stack's port."""

    def __init__(self, stack, role: str) -> None:
        self.name = f"{stack.project}-{role}-1"
        self.status = "running"
        self.labels = {
            "vllm-composer.port": str(stack.port),
            "vllm-composer.role": role,
            "com.docker.compose.project": stack.project,
        }


class _Unlisted:
    """A Docker client that must not be asked to list containers."""

    class containers:
        @staticmethod
        def list(**_: object) -> list:
            raise AssertionError("the port check listed Docker's containers again")


def test_the_port_check_reads_the_snapshots_containers_before_listing_docker(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:  # the port is taken (by "our gateway")
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        stack = make_stack(
            tmp_path / "busy",
            environ={"VLLM_BIND_ADDRESS": "127.0.0.1", "VLLM_PORT": str(busy.getsockname()[1])},
        )
        found = check_port(stack, _Unlisted(), known=[_Held(stack, "gateway")])  # type: ignore[arg-type]
        assert found.status == "ok" and "held by our gateway container" in found.detail
        with pytest.raises(AssertionError, match="listed Docker's containers again"):
            check_port(stack, _Unlisted(), known=[])  # type: ignore[arg-type]


class _Other:
    """A running container of another project labelled with the port (publishing it or not)."""

    def __init__(self, name: str, port: int, publishes: bool, role: str | None = None) -> None:
        self.name = name
        self.status = "running"
        self.labels = {"vllm-composer.port": str(port), "com.docker.compose.project": "demo"}
        self.labels.update({"vllm-composer.role": role} if role else {"vllm-composer.variant": "mtp"})
        bindings = {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]} if publishes else {}
        self.attrs = {"HostConfig": {"PortBindings": bindings}}


def test_a_port_conflict_names_the_container_that_publishes_it_and_the_compose_habit(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        stack = make_stack(tmp_path, environ={"VLLM_BIND_ADDRESS": "127.0.0.1", "VLLM_PORT": str(port)})
        held = [_Other("demo-vllm-1", port, False), _Other("demo-gateway-1", port, True, "gateway")]

        class Client:
            class containers:
                @staticmethod
                def list(**_: object) -> list:
                    return held

        found = check_port(stack, Client())  # type: ignore[arg-type]
    assert (
        found.status == "fail"
        and "published by container demo-gateway-1 of compose project 'demo'" in found.detail
    )
    assert "compose-spec -p demo down" in found.fix
