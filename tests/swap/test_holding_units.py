"""SwapHold and start_hold without Docker: the lease renewal and the control channel wait."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from composer.errors import GatewayControlError, SwapFailed
from composer.gateway.wire import DrainReport
from composer.swap import holding


class _Control:
    """Records renewals; the second one fails (the channel was busy)."""

    def __init__(self) -> None:
        self.renewed: list[tuple[str, float]] = []
        self.released: list[str] = []
        self.four = threading.Event()

    def drain(self, timeout, lease, owner, probe_token, target="", progress=None, **_) -> DrainReport:
        return DrainReport("h1", 2, 0, 0.1)

    def renew(self, hold_id: str, lease: float) -> None:
        self.renewed.append((hold_id, lease))
        if len(self.renewed) == 4:
            self.four.set()
        if len(self.renewed) == 2:
            raise GatewayControlError("renew", "control channel busy")

    def release(self, hold_id: str, **_report: object) -> None:
        self.released.append(hold_id)

    def tether(self, owner: str) -> None:
        return None  # a target that cannot keep a stdin open (kubectl exec)


def test_the_hold_is_renewed_until_it_ends_even_after_a_failed_renewal(monkeypatch) -> None:
    monkeypatch.setattr(holding, "RENEW_EVERY_S", 0.01)
    control = _Control()
    hold = holding.SwapHold(control, 5, lambda _: None)  # type: ignore[arg-type]
    assert hold.begin() == holding.Drained(2, 0, 0.1)
    assert control.four.wait(5), control.renewed
    assert hold.end() is None
    count = len(control.renewed)
    assert set(control.renewed) == {("h1", holding.LEASE_S)} and count >= 4
    assert control.released == ["h1"]
    assert not hold._renewer.is_alive()  # type: ignore[union-attr]
    assert len(control.renewed) == count  # no renewal after the release


class _Tether:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def close(self) -> None:
        self.events.append("tether closed")


class _TetheredControl(_Control):
    """Records the order of drain, release and the tether's close."""

    def __init__(self, release_fails: bool = False) -> None:
        super().__init__()
        self.events: list[str] = []
        self.owners: list[str] = []
        self.release_fails = release_fails

    def tether(self, owner: str) -> _Tether:
        self.events.append("tether opened")
        self.owners.append(owner)
        return _Tether(self.events)

    def drain(self, timeout, lease, owner, probe_token, target="", progress=None, **_) -> DrainReport:
        self.events.append("drain")
        self.owners.append(owner)
        return super().drain(timeout, lease, owner, probe_token, target, progress)

    def release(self, hold_id: str, **_report: object) -> None:
        self.events.append("release")
        if self.release_fails:
            raise GatewayControlError("release", "control channel busy")


def test_the_tether_opens_before_the_drain_and_closes_after_the_release() -> None:
    control = _TetheredControl()
    hold = holding.SwapHold(control, 5, lambda _: None)  # type: ignore[arg-type]
    hold.begin()
    assert hold.end() is None
    assert control.events == ["tether opened", "drain", "release", "tether closed"]
    owner = control.owners[0]
    assert control.owners == [owner, owner] and owner.startswith("compose-spec up (pid ")
    other = holding.SwapHold(control, 5, lambda _: None)  # type: ignore[arg-type]
    assert other.owner != owner  # the tether releases this swap's holds, never another's


def test_a_failed_release_leaves_the_hold_to_its_tether() -> None:
    control = _TetheredControl(release_fails=True)
    hold = holding.SwapHold(control, 5, lambda _: None)  # type: ignore[arg-type]
    hold.begin()
    note = hold.end()
    assert note and "when its tether closes" in note
    assert control.events[-1] == "tether closed"


class _Gateway:
    def __init__(self, status: str) -> None:
        self.status, self.reloads = status, 0

    def reload(self) -> None:
        self.reloads += 1

    def logs(self, tail: int) -> bytes:
        return b"gateway: bind failed\n"


class _Silent:
    calls = 0

    def __init__(self, container) -> None:
        pass

    def tether(self, owner: str) -> None:  # a target that cannot keep a stdin open
        return None

    def state(self) -> None:
        _Silent.calls += 1
        raise GatewayControlError("state", "no answer on the control socket")


def _start(monkeypatch, gateway: _Gateway) -> None:
    monkeypatch.setattr(holding, "gateway_container", lambda stack, client: gateway)
    monkeypatch.setattr(holding, "GatewayControl", _Silent)
    stack = SimpleNamespace(max_model_len=8192)
    holding.start_hold(stack, None, 5, lambda _: None)  # type: ignore[arg-type]


def test_start_hold_fails_at_once_when_the_gateway_exited(monkeypatch) -> None:
    _Silent.calls = 0
    with pytest.raises(
        SwapFailed, match=r"does not answer its control channel: gateway control .state. failed: no answer"
    ) as failed:
        _start(monkeypatch, _Gateway("exited"))
    assert _Silent.calls == 1 and "bind failed" in str(failed.value.log_tail)


def test_start_hold_gives_up_after_its_timeout(monkeypatch) -> None:
    monkeypatch.setattr(holding, "READY_TIMEOUT_S", 0.5)
    _Silent.calls = 0
    with pytest.raises(
        SwapFailed, match=r"does not answer its control channel: gateway control .state. failed: no answer"
    ):
        _start(monkeypatch, _Gateway("running"))
    assert _Silent.calls >= 2


def test_a_hold_that_continues_streams_asks_the_drain_to_and_reports_them() -> None:
    asked: list[bool] = []
    contexts: list[int | None] = []

    class Continuing(_Control):
        def drain(self, *args, continue_streams=False, max_model_len=None, **_) -> DrainReport:
            asked.append(continue_streams)
            contexts.append(max_model_len)
            return DrainReport("h1", 1, 0, 0.1, 3 if continue_streams else 0)

    hold = holding.SwapHold(Continuing(), 5, lambda _: None, context=4096)  # type: ignore[arg-type]
    assert hold.begin(True) == holding.Drained(1, 0, 0.1, 3)
    hold.end()
    again = holding.SwapHold(Continuing(), 5, lambda _: None)  # type: ignore[arg-type]
    assert again.begin() == holding.Drained(1, 0, 0.1, 0)
    again.end()
    assert asked == [True, False]
    assert contexts == [4096, None]  # the next variant's max_model_len: a longer stream drains
