"""The kube waits on their named policies, without a cluster: the Service gate and the
gateway pod's control channel (deadline, condition met, errors that end the wait)."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from composer.engine import retry
from composer.engine.health import Readiness
from composer.errors import GatewayControlError, HealthCheckFailed, KubectlFailed, SwapFailed
from composer.kube import control, rollout
from tests.conftest import FakeClock


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(
        rollout.retry,
        "service_readiness",
        lambda deadline: retry.until(
            deadline, retry.SERVICE_READINESS_INTERVAL_S, clock=fake, sleep=fake.sleep
        ),
    )
    monkeypatch.setattr(
        control.retry,
        "kube_control_ready",
        lambda timeout, errors: retry.within(
            timeout, retry.KUBE_CONTROL_INTERVAL_S, retry_on=errors, clock=fake, sleep=fake.sleep
        ),
    )
    return fake


def _gate(monkeypatch, answers: list[Readiness], deadline: float) -> tuple[list[str], list[int]]:
    @contextmanager
    def service_url(_kubectl, _stack):
        yield "http://127.0.0.1:9"

    said, warmed = [], []
    monkeypatch.setattr(rollout, "service_url", service_url)
    monkeypatch.setattr(rollout, "probe", lambda *_a: answers.pop(0))
    monkeypatch.setattr(rollout, "warm_up", lambda *a: warmed.append(a[-1]))
    rollout.gate(None, SimpleNamespace(api_key=None), "m", deadline, said.append, (), 3)  # type: ignore[arg-type]
    return said, warmed


def test_the_service_gate_returns_at_once_when_ready_and_warms_up(monkeypatch, clock: FakeClock) -> None:
    said, warmed = _gate(monkeypatch, [Readiness(True, "models")], 200.0)
    assert said == [] and warmed == [3] and clock.slept == []


def test_the_service_gate_probes_every_half_second_until_its_deadline(monkeypatch, clock: FakeClock) -> None:
    answers = [Readiness(False, "health", f"503 #{i}") for i in range(5)]
    with pytest.raises(HealthCheckFailed, match=r"^not ready through the Service at health: 503 #2$"):
        _gate(monkeypatch, answers, 101.0)
    assert clock.slept == [0.5, 0.5]
    assert len(answers) == 2  # three probes: at 100, 100.5 and 101 (the deadline)


def test_the_service_gate_waits_then_passes(monkeypatch, clock: FakeClock) -> None:
    answers = [Readiness(False, "health", "503"), Readiness(True, "models")]
    said, warmed = _gate(monkeypatch, answers, 200.0)
    assert said == ["waiting for m through the Service (health: 503)"] and warmed == [3]


def test_a_fatal_answer_ends_the_service_gate_at_once(monkeypatch, clock: FakeClock) -> None:
    answers = [Readiness(False, "models", "401 wrong key", fatal=True), Readiness(True, "models")]
    with pytest.raises(HealthCheckFailed, match=r"^not ready through the Service at models: 401 wrong key$"):
        _gate(monkeypatch, answers, 200.0)
    assert clock.slept == [] and len(answers) == 1


class _Control:
    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures

    def state(self) -> dict:
        if self.failures:
            raise self.failures.pop(0)
        return {}


def _control(monkeypatch, pods: list[str | None], failures: list[Exception]) -> object:
    channel = _Control(failures)
    monkeypatch.setattr(control, "gateway_pod", lambda *_a: pods.pop(0) if len(pods) > 1 else pods[0])
    monkeypatch.setattr(control, "gateway_name", lambda _stack: "demo-gateway")
    monkeypatch.setattr(control, "KubeExec", lambda _kubectl, pod: pod)
    monkeypatch.setattr(control, "GatewayControl", lambda _exec: channel)
    return control.kube_control(None, SimpleNamespace())  # type: ignore[arg-type]


def test_kube_control_returns_at_once_when_the_pod_answers(monkeypatch, clock: FakeClock) -> None:
    channel_failures: list[Exception] = []
    assert isinstance(_control(monkeypatch, ["pod/g-1"], channel_failures), _Control)
    assert clock.slept == []


def test_kube_control_asks_every_second_through_missing_pods_and_busy_channels(
    monkeypatch, clock: FakeClock
) -> None:
    busy = [GatewayControlError("state", "not listening yet")]
    assert isinstance(_control(monkeypatch, [None, "pod/g-1"], busy), _Control)
    assert clock.slept == [1.0, 1.0]


def test_kube_control_fails_with_the_last_error_after_its_deadline(monkeypatch, clock: FakeClock) -> None:
    with pytest.raises(SwapFailed) as failed:
        _control(monkeypatch, [None], [])
    assert str(failed.value) == (
        "the gateway pod does not answer its control channel through `kubectl exec`: "
        "no running, ready pod of deployment/demo-gateway; check it with `kubectl logs deployment/demo-gateway`"
    )
    assert isinstance(failed.value.__cause__, KubectlFailed)
    assert clock.slept == [1.0] * int(control.READY_TIMEOUT_S)


def test_kube_control_does_not_retry_other_errors(monkeypatch, clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="broken reply"):
        _control(monkeypatch, ["pod/g-1"], [ValueError("broken reply")])
    assert clock.slept == []
