"""The gateway's replacement, without Docker: a replacement killed half-way is undone (the
gateway under its own name stays, the extra one goes), and what the old gateway cut at its
stop is read from its own log."""

from __future__ import annotations

from types import SimpleNamespace

from composer.swap import gateway_replace


class Gateway:
    """A gateway container as the Docker SDK shows it: stop, remove, logs."""

    def __init__(self, name: str, status: str = "running", log: bytes = b"") -> None:
        self.name, self.id, self.status, self.log = name, f"id-{name}", status, log
        self.stopped: list[int] = []
        self.removed = False

    def stop(self, timeout: int) -> None:
        self.stopped.append(timeout)

    def remove(self, force: bool = False) -> None:
        self.removed = True

    def logs(self, tail: int) -> bytes:
        return self.log

    @property
    def attrs(self) -> dict:
        return {"Config": {"Env": ["GATEWAY_DRAIN_TIMEOUT=7"]}}


def test_an_interrupted_replacement_is_undone_and_the_snapshot_names_it() -> None:
    """The snapshot keeps the running gateway under the gateway's own name and names the other
    running ones; the next `up` stops and removes those."""
    from composer.engine.containers import project_containers

    named, extra, stopped = Gateway("p-gateway-1"), Gateway("p-gateway-2"), Gateway("p-gateway-3", "exited")
    every = {g.id: g for g in (named, extra, stopped)}
    labels = {"com.docker.compose.project": "p", "vllm-composer.role": "gateway"}
    summaries = [
        {"Id": g.id, "Names": [f"/{g.name}"], "State": g.status, "Labels": labels}
        for g in (extra, stopped, named)
    ]
    client = SimpleNamespace(
        api=SimpleNamespace(containers=lambda all: summaries),
        containers=SimpleNamespace(get=lambda cid: every[cid]),
    )
    stack = SimpleNamespace(project="p", service="vllm")
    variants, gateway, others = project_containers(stack, client)  # type: ignore[arg-type]
    assert (variants, gateway, others) == ([], named, (extra.id,))
    said: list[str] = []
    assert gateway_replace.retire_extra_gateways(client, others, said.append) == 1  # type: ignore[arg-type]
    assert extra.removed and extra.stopped == [5] and not named.removed and not stopped.removed
    assert said == ["a gateway replacement was interrupted: removing the extra gateway container p-gateway-2"]


def test_the_old_gateway_finishes_its_requests_and_what_it_cut_is_read_from_its_log(monkeypatch) -> None:
    log = b"INFO Shutting down\nERROR Cancel 2 running task(s), timeout graceful shutdown exceeded\n"
    old = Gateway("p-gateway-1", log=log)
    state = SimpleNamespace(inflight=5, held=0)
    monkeypatch.setattr(gateway_replace, "GatewayControl", lambda _c: SimpleNamespace(state=lambda: state))
    said: list[str] = []
    assert gateway_replace._retire([old], said.append) == (3, 2)  # type: ignore[list-item]
    assert old.stopped == [7 + 5] and old.removed  # its drain timeout, then 5 s to exit
    assert said == ["stopping the old gateway (5 request(s) to finish, for up to 7s)"]
    quiet = Gateway("p-gateway-1", log=b"INFO Shutting down\n")
    state.inflight = 1
    assert gateway_replace._retire([quiet], said.append) == (1, 0)  # type: ignore[list-item]


class Member:
    """The port holder or a gateway joined to it, as the Docker SDK shows them."""

    def __init__(self, name: str, role: str, started: str, status: str = "running", joins: str = "") -> None:
        self.name, self.id, self.role, self.status = name, f"id-{name}", role, status
        self.started, self.joins, self.calls = started, joins, []  # type: ignore[var-annotated]

    @property
    def attrs(self) -> dict:
        mode = f"container:id-{self.joins}" if self.joins else "default"
        return {"State": {"StartedAt": self.started, "ExitCode": 137}, "HostConfig": {"NetworkMode": mode}}

    def start(self) -> None:
        self.calls.append("start")
        self.status, self.started = "running", "2026-01-01T10:00:09.5Z"

    def restart(self, timeout: int) -> None:
        self.calls.append("restart")
        self.started = "2026-01-01T10:00:10.000000001Z"

    def reload(self) -> None:
        return None


def _pair(holder: Member, gateway: Member) -> SimpleNamespace:
    every = {holder.id: holder, gateway.id: gateway}

    def listed(all: bool, filters: dict) -> list[Member]:
        role = filters["label"][1].split("=", 1)[1]
        return [m for m in every.values() if m.role == role]

    def get(key: str) -> Member:  # by id or by name, as Docker's
        from docker.errors import NotFound

        found = every.get(key) or next((m for m in every.values() if m.name == key), None)
        if found is None:
            raise NotFound(key)
        return found

    client = SimpleNamespace(containers=SimpleNamespace(list=listed, get=get))
    gateway.client = holder.client = client  # type: ignore[attr-defined]
    return client


STACK = SimpleNamespace(project="p", port=8000, bind_address="127.0.0.1")


def test_a_holder_restarted_after_its_gateway_joined_it_is_a_fault_even_when_both_run() -> None:
    # Docker's times: nanoseconds with trailing zeros cut ("...01.9Z" is later than "...01.85Z")
    holder = Member("p-gateway-port-1", "gateway-port", "2026-01-01T10:00:01.9Z")
    gateway = Member("p-gateway-1", "gateway", "2026-01-01T10:00:01.85Z", joins="p-gateway-port-1")
    fault = gateway_replace.port_fault(STACK, _pair(holder, gateway))  # type: ignore[arg-type]
    assert fault is not None and "restarted after the gateway p-gateway-1 joined" in fault
    # the gateway a snapshot read: its holder is inspected through its network, nothing listed
    unlisted = _pair(holder, gateway)
    unlisted.containers.list = None  # type: ignore[attr-defined]
    assert gateway_replace.port_fault(STACK, unlisted, gateway) == fault  # type: ignore[arg-type]
    gateway.started = "2026-01-01T10:00:02Z"  # the gateway joined it after: they serve together
    assert gateway_replace.port_fault(STACK, _pair(holder, gateway)) is None  # type: ignore[arg-type]
    assert gateway_replace.port_fault(STACK, unlisted, gateway) is None  # type: ignore[arg-type]


def test_up_starts_a_stopped_holder_and_restarts_its_gateway(monkeypatch) -> None:
    holder = Member("p-gateway-port-1", "gateway-port", "2026-01-01T10:00:01Z", status="exited")
    gateway = Member("p-gateway-1", "gateway", "2026-01-01T10:00:02Z", joins="p-gateway-port-1")
    client = _pair(holder, gateway)
    monkeypatch.setattr(gateway_replace, "wait_published", lambda *_a: SimpleNamespace(answers=True))
    said: list[str] = []
    line = gateway_replace.repair_port(STACK, client, said.append)  # type: ignore[arg-type]
    assert (holder.calls, gateway.calls) == (["start"], ["restart"])
    assert line is not None and "p-gateway-port-1 is exited (exit code 137)" in line
    assert said and said[0].startswith("the published port is dead")
    assert gateway_replace.repair_port(STACK, client, said.append) is None  # type: ignore[arg-type]


def test_a_control_call_starts_a_stopped_gateway_and_a_refusal_is_one_line(monkeypatch) -> None:
    import pytest
    from docker.errors import APIError

    from composer.errors import ComposerError

    holder = Member("p-gateway-port-1", "gateway-port", "2026-01-01T10:00:01Z")
    gateway = Member(
        "p-gateway-1", "gateway", "2026-01-01T10:00:02Z", status="exited", joins="p-gateway-port-1"
    )
    client = _pair(holder, gateway)
    monkeypatch.setattr(gateway_replace, "wait_published", lambda *_a: SimpleNamespace(answers=True))
    said: list[str] = []
    assert gateway_replace.running_gateway(STACK, client, said.append) is gateway  # type: ignore[arg-type]
    assert gateway.calls == ["start"] and holder.calls == []
    assert said == ["the gateway p-gateway-1 is exited: starting it again"]

    def refuse() -> None:
        raise APIError("409", explanation="cannot join network of a non running container")

    gateway.status, gateway.start = "exited", refuse  # type: ignore[method-assign]
    monkeypatch.setattr(gateway_replace, "RESTARTING_S", 0.0)  # nor does Docker start it meanwhile
    with pytest.raises(ComposerError, match="Docker did not start p-gateway-1: cannot join network"):
        gateway_replace.running_gateway(STACK, client, said.append)  # type: ignore[arg-type]


def test_a_swap_calls_a_running_gateway_stopped_when_its_holder_is_down(monkeypatch) -> None:
    """What makes a held swap's gate start the gateway again (transaction.through_restarts)."""
    import composer.render.gateway as rendered
    from composer.swap import transaction

    holder = Member("p-gateway-port-1", "gateway-port", "2026-01-01T10:00:01Z", status="exited")
    gateway = Member("p-gateway-1", "gateway", "2026-01-01T10:00:02Z", joins="p-gateway-port-1")
    client = _pair(holder, gateway)
    running = {**gateway.attrs, "State": {"Running": True, "StartedAt": gateway.started}}
    seen = SimpleNamespace(attrs=running, id=gateway.id, name=gateway.name, status="running", client=client)
    client.containers.get = lambda name: seen if name == gateway.name else holder
    monkeypatch.setattr(
        rendered, "build_gateway_spec", lambda _: SimpleNamespace(container_name=gateway.name)
    )
    ctx = transaction.Context(STACK, client, SimpleNamespace())  # type: ignore[arg-type]
    assert transaction.gateway_stopped(ctx) == "its port holder p-gateway-port-1 is exited (exit code 137)"
    holder.status = "running"
    assert transaction.gateway_stopped(ctx) is None


def test_a_gateway_docker_restarted_on_its_own_meanwhile_is_no_failure(monkeypatch) -> None:
    from docker.errors import APIError

    holder = Member("p-gateway-port-1", "gateway-port", "2026-01-01T10:00:05Z")
    gateway = Member("p-gateway-1", "gateway", "2026-01-01T10:00:02Z", joins="p-gateway-port-1")
    client = _pair(holder, gateway)
    monkeypatch.setattr(gateway_replace, "wait_published", lambda *_a: SimpleNamespace(answers=True))

    def raced(timeout: int) -> None:  # its own exit and restart policy came first
        raise APIError("409", explanation="container is restarting")

    gateway.restart = raced  # type: ignore[method-assign]
    line = gateway_replace.repair_port(STACK, client, lambda _line: None)  # type: ignore[arg-type]
    assert line is not None and "restarted after the gateway p-gateway-1 joined" in line


def test_up_waits_for_a_gateway_that_just_restarted_on_its_own(monkeypatch) -> None:
    """Its own exit after its holder restarted: it is starting, not a dead port (nothing to mend)."""
    from datetime import UTC, datetime

    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    holder = Member("p-gateway-port-1", "gateway-port", "2026-01-01T10:00:01Z")
    gateway = Member("p-gateway-1", "gateway", now, joins="p-gateway-port-1")
    waited: list[float] = []
    monkeypatch.setattr(gateway_replace, "wait_published", lambda _c, _s, seconds: waited.append(seconds))
    assert gateway_replace.repair_port(STACK, _pair(holder, gateway), lambda _line: None) is None  # type: ignore[arg-type]
    assert waited == [gateway_replace.SETTLE_S] and gateway.calls == []
    gateway.started = "2026-01-01T10:00:02Z"  # long since: nothing to wait for
    assert gateway_replace.repair_port(STACK, _pair(holder, gateway), lambda _line: None) is None  # type: ignore[arg-type]
    assert waited == [gateway_replace.SETTLE_S]
