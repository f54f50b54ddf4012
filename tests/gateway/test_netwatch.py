"""The gateway's watch on its network: it ends the gateway once the network it serves from lost
its interfaces (its port holder restarted into a new one), after the holder is back, and never
where there was nothing to watch."""

from __future__ import annotations

from composer.gateway.routing import netwatch


class Namespace:
    """Interfaces that vanish after `lost_after` looks; the holder's files rewritten after `back_after`."""

    def __init__(self, lost_after: int, back_after: int | None) -> None:
        self.looks, self.lost_after, self.back_after = 0, lost_after, back_after
        self.now = 0.0

    def look(self) -> set[str]:
        self.looks += 1
        return set() if self.looks > self.lost_after else {"eth0"}

    def stamp(self) -> float:
        return 2.0 if self.back_after is not None and self.looks > self.back_after else 1.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.looks += 0 if self.looks <= self.lost_after else 1  # time passes after the loss

    def gone(self) -> str | None:
        return netwatch.network_gone(self.look, self.stamp, self.sleep, lambda: self.now)


def test_a_lost_network_ends_the_watch_once_the_holder_restarted() -> None:
    ns = Namespace(lost_after=5, back_after=9)
    line = ns.gone()
    assert line is not None and "eth0" in line and "its port holder restarted" in line
    assert ns.now < netwatch.HOLDER_WAIT_S  # it did not wait for the deadline


def test_a_holder_that_does_not_come_back_ends_the_watch_at_its_deadline() -> None:
    ns = Namespace(lost_after=3, back_after=None)
    line = ns.gone()
    assert line is not None and "did not restart" in line
    assert ns.now >= netwatch.HOLDER_WAIT_S


def test_a_namespace_with_only_the_loopback_is_not_watched() -> None:
    ns = Namespace(lost_after=0, back_after=None)
    assert ns.gone() is None


def test_this_machine_lists_its_interfaces() -> None:
    assert isinstance(netwatch.interfaces(), set)
