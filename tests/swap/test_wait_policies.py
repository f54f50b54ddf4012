"""The swap's waits on their named policies, without Docker: the settle probe of a gateway
that just started, a refused published port asked again, and a recreated gateway's route
and published port (deadline, condition met, errors that end the wait)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from composer.engine import published_port, retry
from composer.engine.published_port import PublishedPort
from composer.errors import GatewayControlError
from composer.swap import gateway_port, gateway_replace, swapper
from tests.conftest import FakeClock


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    settle, refusal, answers = retry.settle_ready, retry.published_refusal, retry.port_answers
    port_back = retry.port_back
    monkeypatch.setattr(retry, "settle_ready", lambda s: settle(s, clock=fake, sleep=fake.sleep))
    monkeypatch.setattr(retry, "published_refusal", lambda: refusal(sleep=fake.sleep))
    monkeypatch.setattr(retry, "port_answers", lambda t: answers(t, clock=fake, sleep=fake.sleep))
    monkeypatch.setattr(
        retry,
        "port_back",
        lambda t, errors: retry.within(
            t, retry.PORT_BACK_INTERVAL_S, retry_on=errors, clock=fake, sleep=fake.sleep
        ),
    )
    assert port_back is not None
    return fake


def _is_ready(monkeypatch, answers: list[object], settle_s: float) -> bool:
    def probe(_target) -> bool:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return bool(answer)

    monkeypatch.setattr(swapper, "probe_once", probe)
    monkeypatch.setattr(swapper, "running_target", lambda _stack, current: current)
    return swapper.is_ready(None, SimpleNamespace(variant="mtp"), settle_s)  # type: ignore[arg-type]


def test_the_settle_probe_without_settle_time_probes_once(monkeypatch, clock: FakeClock) -> None:
    answers: list[object] = [False, True]
    assert _is_ready(monkeypatch, answers, 0.0) is False
    assert answers == [True] and clock.slept == []


def test_the_settle_probe_returns_at_once_when_ready(monkeypatch, clock: FakeClock) -> None:
    assert _is_ready(monkeypatch, [True], 10.0) is True and clock.slept == []


def test_the_settle_probe_asks_every_fifth_of_a_second_until_ready_or_the_deadline(
    monkeypatch, clock: FakeClock
) -> None:
    assert _is_ready(monkeypatch, [False, False, True], 10.0) is True
    assert clock.slept == [0.2, 0.2]
    assert _is_ready(monkeypatch, [False] * 100, 1.0) is False
    assert clock.slept[2:] == [0.2] * 5


def test_the_settle_probe_does_not_swallow_other_errors(monkeypatch, clock: FakeClock) -> None:
    with pytest.raises(RuntimeError, match="docker went away"):
        _is_ready(monkeypatch, [RuntimeError("docker went away"), True], 10.0)


def _port(answers: list[PublishedPort]):
    return lambda _url: answers.pop(0)


def test_a_refusal_is_asked_three_times_and_the_last_one_is_the_answer(monkeypatch, clock: FakeClock) -> None:
    dead = [PublishedPort("u", False, dead=True, detail=f"refused #{i}") for i in range(4)]
    monkeypatch.setattr(published_port, "_probe_once", _port(dead))
    gateway = SimpleNamespace(attrs={})
    found = published_port.probe_published(gateway, SimpleNamespace(bind_address="127.0.0.1", port=9))  # type: ignore[arg-type]
    assert found.dead and found.detail == "refused #2" and len(dead) == 1
    assert clock.slept == [0.2, 0.2]


def test_an_answer_or_a_failure_that_is_no_refusal_ends_the_probe_at_once(
    monkeypatch, clock: FakeClock
) -> None:
    stack = SimpleNamespace(bind_address="127.0.0.1", port=9)
    for first in (PublishedPort("u", True), PublishedPort("u", False, detail="/gateway/health answered 503")):
        monkeypatch.setattr(published_port, "_probe_once", _port([first, PublishedPort("u", True)]))
        assert published_port.probe_published(SimpleNamespace(attrs={}), stack) == first  # type: ignore[arg-type]
    assert clock.slept == []


class _Gateway:
    def reload(self) -> None:
        return None


def test_a_recreated_gateway_is_probed_until_it_answers_or_port_back_timeout(
    monkeypatch, clock: FakeClock
) -> None:
    answers = [PublishedPort("u", False, detail="no answer"), PublishedPort("u", True)]
    monkeypatch.setattr(published_port, "probe_published", lambda _g, _s: answers.pop(0))
    assert published_port.wait_published(_Gateway(), None).answers  # type: ignore[arg-type]
    assert clock.slept == [0.2]
    silent = [PublishedPort("u", False, detail=f"no answer #{i}") for i in range(1000)]
    monkeypatch.setattr(published_port, "probe_published", lambda _g, _s: silent.pop(0))
    began = clock.now
    found = published_port.wait_published(_Gateway(), None, gateway_port.PORT_BACK_TIMEOUT)  # type: ignore[arg-type]
    assert not found.answers and found.detail == f"no answer #{999 - len(silent)}"  # the last probe
    assert set(clock.slept) == {0.2} and clock.now - began >= gateway_port.PORT_BACK_TIMEOUT


def test_a_recreated_gateway_is_routed_once_its_control_channel_answers(
    monkeypatch, clock: FakeClock
) -> None:
    errors = [GatewayControlError("route", "not listening yet")] * 2
    routed: list[str] = []

    class Control:
        def route(self, upstream: str, variant: str | None = None) -> str:
            if errors:
                raise errors.pop()
            routed.append(upstream)
            return "old"

    route = lambda _gateway: Control().route("http://p-mtp:8000")  # noqa: E731
    gateway_replace._ready(None, route)  # type: ignore[arg-type]
    assert routed == ["http://p-mtp:8000"] and clock.slept == [0.2, 0.2]
    errors[:] = [GatewayControlError("route", f"refused #{i}") for i in range(1000)]
    with pytest.raises(GatewayControlError):
        gateway_replace._ready(None, route)  # type: ignore[arg-type]
