"""The connection cap fits in the gateway's open files: the limit is raised toward the hard
one, and the cap lowered (with a warning) when even that is short."""

from __future__ import annotations

import resource

import pytest

from composer.gateway.public import limits


@pytest.fixture
def rlimit(monkeypatch: pytest.MonkeyPatch):
    """A fake RLIMIT_NOFILE: `set(soft, hard)`, then read what the gateway asked for."""

    class Fake:
        def __init__(self) -> None:
            self.soft = self.hard = 0
            self.refuse = False
            self.asked: list[tuple[int, int]] = []

        def get(self, which: int) -> tuple[int, int]:
            assert which == resource.RLIMIT_NOFILE
            return self.soft, self.hard

        def set(self, which: int, values: tuple[int, int]) -> None:
            self.asked.append(values)
            if self.refuse:
                raise ValueError("not allowed")
            self.soft, self.hard = values

    fake = Fake()
    monkeypatch.setattr(limits.resource, "getrlimit", fake.get)
    monkeypatch.setattr(limits.resource, "setrlimit", fake.set)
    return fake


def test_a_low_soft_limit_is_raised_to_what_the_cap_needs(rlimit) -> None:
    rlimit.soft, rlimit.hard = 1024, 524288
    assert limits.open_files_for(1024) == (1024, None)
    assert rlimit.asked == [(2 * 1024 + limits.FILES_BESIDES, 524288)]


def test_a_limit_already_high_enough_is_left_alone(rlimit) -> None:
    rlimit.soft, rlimit.hard = 20000, 20000
    assert limits.open_files_for(1024) == (1024, None)
    assert rlimit.asked == []


def test_a_short_hard_limit_lowers_the_cap_and_says_so(rlimit) -> None:
    rlimit.soft, rlimit.hard = 1024, 1024
    cap, warning = limits.open_files_for(4096)
    assert cap == (1024 - limits.FILES_BESIDES) // 2
    assert warning is not None and "max_connections=4096" in warning and "1024" in warning
    assert rlimit.asked == []  # soft is already at the hard limit: nothing to raise


def test_a_refused_raise_keeps_the_soft_limit_and_fits_the_cap_in_it(rlimit) -> None:
    rlimit.soft, rlimit.hard = 1024, 65536
    rlimit.refuse = True
    cap, warning = limits.open_files_for(1024)
    assert cap == (1024 - limits.FILES_BESIDES) // 2 and warning is not None
