"""The gateway probed through its published host port (issue 22), without Docker: a
refused connection is a dead port proxy, a server that accepts and hangs up is not, a port
that accepts and stays silent is dead only while the gateway answers on its own address, and
`status` and doctor say the fix instead of "not listening yet" or "port is free"."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from composer.doctor.preflight import check_published_port
from composer.engine import published_port
from composer.engine.published_port import DEAD_PORT, probe_published, published_address
from composer.swap.status import format_status
from tests.conftest import answering as answering_server
from tests.doctor.fakes import make_stack


class _Gateway:
    """A running gateway container as the Docker SDK shows it: its published binding."""

    def __init__(self, port: int, status: str = "running", inside: str = "") -> None:
        self.name = "p-gateway-1"
        self.status = status
        self.labels = {"vllm-composer.role": "gateway"}
        self.attrs = {
            "NetworkSettings": {
                "Ports": {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]},
                "Networks": {"p_default": {"IPAddress": inside}},
            }
        }


class _Client:
    def __init__(self, gateway: _Gateway | None) -> None:
        self.containers = self
        self._gateway = gateway

    def list(self, all: bool = False, filters: dict | None = None) -> list[_Gateway]:
        return [self._gateway] if self._gateway is not None else []


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def answering() -> Iterator[int]:
    with answering_server("/gateway/health", b"ok") as port:
        yield port


@pytest.fixture
def hanging_up() -> Iterator[int]:
    """Accepts and closes at once: Docker's proxy while the gateway does not listen yet."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join(2)
    sock.close()


@pytest.fixture
def silent() -> Iterator[int]:
    """Listens and never accepts: dockerd's reservation of a port whose forwarding rules are gone."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


@pytest.fixture
def inside_is(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Point the gateway's container address at a host port; probes give up on a silent port
    after a short read."""
    monkeypatch.setattr(published_port, "PROBE_TIMEOUT", httpx.Timeout(0.5, connect=1.0))
    return lambda port: monkeypatch.setattr(
        published_port, "container_addresses", lambda container: [f"http://127.0.0.1:{port}"]
    )


def test_the_gateway_is_asked_on_its_network_addresses_of_a_local_engine_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    gateway = _Gateway(8000, inside="172.18.0.5")
    assert published_port.container_addresses(gateway) == ["http://172.18.0.5:8000"]  # type: ignore[arg-type]
    assert published_port.container_addresses(_Gateway(8000)) == []  # type: ignore[arg-type]
    monkeypatch.setenv("DOCKER_HOST", "tcp://gpu-box:2375")
    assert published_port.container_addresses(gateway) == []  # type: ignore[arg-type]


def test_a_silent_port_is_dead_while_the_gateway_answers_inside(
    tmp_path: Path, silent: int, answering: int, inside_is: Callable[[int], None]
) -> None:
    inside_is(answering)
    found = probe_published(_Gateway(silent), make_stack(tmp_path))  # type: ignore[arg-type]
    assert found.dead and not found.answers and "answers inside" in found.detail


def test_a_silent_port_is_not_dead_while_the_gateway_is_silent_too(
    tmp_path: Path, silent: int, inside_is: Callable[[int], None]
) -> None:
    inside_is(silent)
    found = probe_published(_Gateway(silent), make_stack(tmp_path))  # type: ignore[arg-type]
    assert not found.dead and not found.answers


def test_the_published_address_comes_from_dockers_record(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    assert published_address(_Gateway(21999), stack) == ("127.0.0.1", 21999)  # type: ignore[arg-type]


def test_a_refused_port_is_dead(tmp_path: Path) -> None:
    found = probe_published(_Gateway(_closed_port()), make_stack(tmp_path))  # type: ignore[arg-type]
    assert found.dead and not found.answers


def test_an_answering_gateway_is_alive(tmp_path: Path, answering: int) -> None:
    found = probe_published(_Gateway(answering), make_stack(tmp_path))  # type: ignore[arg-type]
    assert found.answers and not found.dead and found.url == f"http://127.0.0.1:{answering}"


def test_a_proxy_that_hangs_up_is_not_called_dead(tmp_path: Path, hanging_up: int) -> None:
    found = probe_published(_Gateway(hanging_up), make_stack(tmp_path))  # type: ignore[arg-type]
    assert not found.answers and not found.dead


def test_doctor_says_the_proxy_is_gone_instead_of_port_is_free(tmp_path: Path) -> None:
    port = _closed_port()
    stack = make_stack(tmp_path, environ={"VLLM_PORT": str(port)})
    found = check_published_port(stack, _Client(_Gateway(port)))  # type: ignore[arg-type]
    assert found is not None and found.failed and found.detail == DEAD_PORT
    assert "--recreate-gateway" in found.detail and "--recreate-gateway" in found.fix
    assert "docker restart" not in found.fix  # it fails while the port holder is down


def test_doctor_says_nothing_more_without_a_running_gateway(tmp_path: Path) -> None:
    stack = make_stack(tmp_path)
    assert check_published_port(stack, _Client(None)) is None  # type: ignore[arg-type]
    assert check_published_port(stack, _Client(_Gateway(_closed_port(), "exited"))) is None  # type: ignore[arg-type]
    assert check_published_port(stack, None) is None


def test_doctor_leaves_a_live_port_or_another_port_to_the_bind_test(tmp_path: Path, answering: int) -> None:
    stack = make_stack(tmp_path, environ={"VLLM_PORT": str(answering)})
    assert check_published_port(stack, _Client(_Gateway(answering))) is None  # type: ignore[arg-type]
    elsewhere = make_stack(tmp_path, environ={"VLLM_PORT": str(_closed_port())})
    assert check_published_port(elsewhere, _Client(_Gateway(_closed_port()))) is None  # type: ignore[arg-type]


def _status(dead: bool) -> dict:
    return {
        "project": "p",
        "running": True,
        "variant": "mtp",
        "container": "p-vllm-1",
        "image": "vllm-sim:latest",
        "health": "not ready",
        "health_detail": "health: not listening yet (ConnectError)",
        "docker_health": "healthy",
        "uptime_seconds": 60.0,
        "restart_count": 0,
        "last_exit": None,
        "port": 8000,
        "url": "http://127.0.0.1:8000",
        "served_model_name": "m",
        "config_hash": "x",
        "matches_stack": True,
        "stopped": [],
        "asleep": [],
        "gateway": {
            "container": "p-gateway-1",
            "state": "running",
            "published_port": {
                "url": "http://127.0.0.1:8000",
                "answers": not dead,
                "dead": dead,
                "detail": "",
            },
            "backend_ready": True,
            "held": 0,
            "inflight": 0,
            "holds": 0,
            "waking": False,
        },
    }


def _status_data(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, dead: bool) -> dict:
    """`status_data` over a snapshot whose variant and gateway are `_status(dead)`'s."""
    from composer.swap import snapshot, status

    data = _status(dead)
    gateway = data.pop("gateway")
    monkeypatch.setattr(snapshot, "take", lambda stack, client, **_: snapshot.Snapshot("p", ()))
    monkeypatch.setattr(status, "_variant_status", lambda stack, snap: dict(data))
    monkeypatch.setattr(status, "gateway_status", lambda stack, snap: gateway)
    return status.status_data(make_stack(tmp_path), None)


def test_status_says_the_proxy_is_gone_instead_of_not_listening_yet(monkeypatch, tmp_path: Path) -> None:
    data = _status_data(monkeypatch, tmp_path, dead=True)
    assert data["health"] == "unreachable" and data["health_detail"] == DEAD_PORT
    text = format_status(data)
    assert f"health        {DEAD_PORT}" in text and "not listening yet" not in text
    assert f"running (p-gateway-1), but {DEAD_PORT}" in text


def test_status_of_a_live_port_is_unchanged(monkeypatch, tmp_path: Path) -> None:
    data = _status_data(monkeypatch, tmp_path, dead=False)
    assert data["health"] == "not ready" and "backend ready" in format_status(data)
