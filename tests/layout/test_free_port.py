"""The tests' port picker never hands the same port out twice in a row (two stacks of one test)."""

from __future__ import annotations

from tests.conftest import free_port


def test_two_calls_before_any_bind_get_different_ports() -> None:
    first = free_port((64000, 64039))
    picked = {first, *(free_port((64000, 64039)) for _ in range(20))}
    assert len(picked) == 21
