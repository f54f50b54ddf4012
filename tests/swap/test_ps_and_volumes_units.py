"""`ps` as a table of the project's containers (pure rows from a snapshot), and `down`
keeping the project's volume unless --volumes (Docker faked: only its answers matter)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from composer.swap import down as down_module
from composer.swap.outcome import UpOptions
from composer.swap.ps import format_ps, ps_rows, published
from composer.swap.snapshot import Snapshot, classify
from composer.swap.transaction import Context
from tests.swap.test_plan_units import _info
from tests.swap.test_standby_units import _stack

GATEWAY_PORTS = {
    "8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8001"}, {"HostIp": "::1", "HostPort": "8001"}]
}


class _Container:
    def __init__(self, name: str, status: str = "running", ports: dict | None = None, **labels: str) -> None:
        self.name, self.status, self.labels = name, status, labels
        self.attrs = {"NetworkSettings": {"Ports": ports or {}}, "State": {"Health": {"Status": "healthy"}}}


class _Box:
    def __init__(self, name: str) -> None:
        self.name = name
        self.container = _Container(name)


def test_ps_lists_variants_with_their_state_and_the_gateway_with_its_published_port() -> None:
    stack = _stack()
    serving = _info("mtp", service="vllm", sleep_mode=False)
    stopped = replace(_info("baseline", service="vllm", sleep_mode=False, h="old"), status="exited")
    members = classify(stack, [(_Box(i.name), i) for i in (serving, stopped)], None, {})  # type: ignore[misc]
    gateway = _Container("p-gateway-1", ports=GATEWAY_PORTS, **{"vllm-composer.role": "gateway"})
    rows = ps_rows(Snapshot("p", members), [gateway, _Container(serving.name)])
    assert [(r["name"], r["variant"], r["state"]) for r in rows] == [
        ("p-vllm-1", "mtp", "serving"),
        ("p-vllm-1", "baseline", "exited"),
        ("p-gateway-1", "gateway", "running (healthy)"),
    ]
    assert rows[2]["ports"] == "127.0.0.1:8001->8000/tcp" and rows[0]["ports"] == ""
    table = format_ps(rows, "p").splitlines()
    assert table[0].split() == ["NAME", "VARIANT/ROLE", "STATE", "PORTS"]
    assert table[3].index("127.0.0.1:8001") == table[0].index("PORTS")  # aligned columns
    assert format_ps([], "p") == "no container of project p"


def test_a_stopped_container_shows_the_ports_it_would_publish() -> None:
    attrs = {"NetworkSettings": {"Ports": {}}, "HostConfig": {"PortBindings": GATEWAY_PORTS}}
    assert published(attrs) == "127.0.0.1:8001->8000/tcp"


class _Volume:
    def __init__(self, name: str) -> None:
        self.name, self.removed = name, False

    def remove(self) -> None:
        self.removed = True


class _Client:
    def __init__(self, volumes: list[_Volume]) -> None:
        self.asked: list[dict] = []
        outer = self

        class volumes_api:
            @staticmethod
            def list(filters: dict) -> list[_Volume]:
                outer.asked.append(filters)
                return volumes

        self.volumes = volumes_api


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []
    monkeypatch.setattr(down_module, "take", lambda stack, client: Snapshot(stack.project, ()))
    monkeypatch.setattr(
        down_module, "compose", lambda project, file, args, **_: calls.append([project, *args])
    )
    return calls


def test_down_keeps_the_volume_and_says_how_to_remove_it(no_engine: list[list[str]]) -> None:
    stack = _stack()
    state = _Volume(f"{stack.project}_gateway-state")
    client = _Client([state])
    down_module.Downer(Context(stack, client, UpOptions()), Snapshot(stack.project, ()), 60).stop_project(  # type: ignore[arg-type]
        down_module.StopProject(stack.project, (state.name,))
    )
    assert no_engine == [[stack.project, "down", "--remove-orphans"]] and not state.removed
    said = down_module.kept_volumes(stack, client)  # type: ignore[arg-type]
    assert said == (
        f"kept the project's volume {stack.project}_gateway-state (the gateway's switch history): "
        f"`compose-spec -p {stack.project} down --volumes` removes it"
    )
    assert client.asked[-1] == {"label": f"com.docker.compose.project={stack.project}"}
    assert down_module.kept_volumes(stack, _Client([])) is None  # type: ignore[arg-type]


def test_down_volumes_removes_the_projects_volumes(no_engine: list[list[str]]) -> None:
    stack = _stack()
    state = _Volume(f"{stack.project}_gateway-state")
    said: list[str] = []
    ctx = Context(stack, _Client([state]), UpOptions(), said.append)  # type: ignore[arg-type]
    down_module.Downer(ctx, Snapshot(stack.project, ()), 60).stop_project(
        down_module.StopProject(stack.project, (state.name,), remove=True)
    )
    assert state.removed and said == [f"removing volume {stack.project}_gateway-state"]
