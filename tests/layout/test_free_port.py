"""The tests' port picker never hands the same port out twice in a row (two stacks of one test)."""

from __future__ import annotations

import pytest

from tests import conftest


def test_two_calls_before_any_bind_get_different_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "_issued", set())  # what earlier tests took does not count here
    picked = [conftest.free_port((64000, 64039)) for _ in range(21)]
    assert len(set(picked)) == 21
