"""An error that is not a readiness state fails the gate at once: a key an HTTP header
cannot carry never becomes "ready", so polling it until the timeout only adds downtime."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from composer.engine.gate import GateTarget, wait_ready
from composer.errors import HealthCheckFailed
from tests.conftest import answering, free_port


class _RunningContainer:
    """A container that keeps running and logs nothing (the gate's view of it)."""

    def exit_reason(self) -> str | None:
        return None

    def log(self, tail: int | None = None) -> str:
        return ""

    first_run_log = log


@pytest.fixture
def healthy_port() -> Iterator[int]:
    """Answers /health 200 and everything else 404, like a server still loading its routes."""
    with answering("/health") as port:
        yield port


GATE_TIMEOUT = 30.0  # "at once" is well before it, however loaded the machine


def _gate(port: int, key: str, timeout: float = GATE_TIMEOUT) -> tuple[HealthCheckFailed, float]:
    target = GateTarget("mtp", port, "127.0.0.1", "model", key)
    started = time.monotonic()
    with pytest.raises(HealthCheckFailed) as err:
        wait_ready(_RunningContainer(), target, started + timeout, 0.05, lambda _: None)  # type: ignore[arg-type]
    return err.value, time.monotonic() - started


@pytest.mark.parametrize("key", ["sk-schlüssel-0123456789", "sk-ключ-0123456789abcdef"])
def test_non_ascii_key_fails_the_gate_at_once(key: str) -> None:
    """Nothing listens yet: the header cannot be built, so waiting for the server is pointless."""
    failure, waited = _gate(free_port(), key)
    assert waited < GATE_TIMEOUT / 2, f"the gate polled for {waited:.1f}s"
    assert "cannot be built or sent" in str(failure) and key not in str(failure)


def test_key_h11_refuses_fails_the_gate_once_the_server_answers(healthy_port: int) -> None:
    """/health needs no key; the first request that carries it fails to send (LocalProtocolError)."""
    failure, waited = _gate(healthy_port, "sk-line\nbreak-0123456789")
    assert waited < GATE_TIMEOUT / 2 and "LocalProtocolError" in str(failure)
    assert "break" not in str(failure), "the key is never shown"


def test_a_server_that_is_not_ready_still_waits_to_the_timeout(healthy_port: int) -> None:
    """A readiness state (here /v1/models answering 404) keeps the gate polling."""
    failure, waited = _gate(healthy_port, "sk-valid-key-0123456789", timeout=0.6)
    assert waited >= 0.6 and "not ready after" in str(failure)
