"""The tests' port picker never hands the same port out twice in a row (two stacks of one test)."""

from __future__ import annotations

import itertools

import pytest

from tests import conftest


def test_two_calls_before_any_bind_get_different_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "_issued", set())  # what earlier tests took does not count here
    picked = [conftest.free_port((64000, 64039)) for _ in range(21)]
    assert len(set(picked)) == 21


def test_each_xdist_worker_draws_from_its_own_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    slices = []
    for worker in range(4):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{worker}")
        slices.append(conftest._worker_share((61000, 65535)))
    for (first, last), (next_first, _) in itertools.pairwise(slices):
        assert first < last < next_first  # disjoint, in order
    assert slices[0][0] == 61000 and slices[-1][1] <= 65535
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert conftest._worker_share((61000, 65535)) == (61000, 65535)
