"""The drain's progress through the control client, without Docker: a fake exec target
answers `drain` and `drain-wait` as the gateway's control channel does."""

from __future__ import annotations

import json

from composer.gateway.host.client import DrainProgress, GatewayControl

DONE = {"done": True, "hold_id": "h1", "drained": 1, "cut": 0, "duration_s": 2.5}


def _wait_of(command: list[str]) -> str:
    """The long poll's wait of one control command: the body's wait_s, or the query's."""
    path, body = command[4], command[5] if len(command) > 5 else "{}"
    if "?wait_s=" in path:
        return path.split("?wait_s=", 1)[1]
    return str(float(json.loads(body)["wait_s"]))


class _Exec:
    """Replies in order; records each command."""

    def __init__(self, *replies: dict) -> None:
        self.replies = list(replies)
        self.calls: list[list[str]] = []

    def exec_run(self, cmd, demux=True):
        self.calls.append(list(cmd))
        return 0, (json.dumps(self.replies.pop(0)).encode(), b"")


def test_a_drain_with_something_in_flight_reports_each_wait() -> None:
    target = _Exec(
        {"id": "d1", "done": False, "inflight": 2, "elapsed_s": 1.0},
        {"id": "d1", "done": False, "inflight": 1, "elapsed_s": 2.0},
        {"id": "d1", **DONE},
    )
    seen: list[DrainProgress] = []
    report = GatewayControl(target).drain(60, 60, owner="o", progress=seen.append)
    assert report.drained == 1 and report.hold_id == "h1"
    assert [p.describe() for p in seen] == [
        "draining (2 in flight, 1 s of 60 s)",
        "draining (1 in flight, 2 s of 60 s)",
    ]
    # asked about once a second while it reports, not every 20 s
    assert all(_wait_of(c) == "1.0" for c in target.calls)


def test_an_empty_drain_reports_nothing() -> None:
    target = _Exec({"id": "d1", **DONE, "drained": 0})
    seen: list[DrainProgress] = []
    GatewayControl(target).drain(60, 60, progress=seen.append)
    assert seen == []


def test_an_older_gateway_without_counts_reports_nothing() -> None:
    target = _Exec({"id": "d1", "done": False}, {"id": "d1", **DONE})
    seen: list[DrainProgress] = []
    GatewayControl(target).drain(60, 60, progress=seen.append)
    assert seen == [] and len(target.calls) == 2


def test_without_a_callback_the_waits_stay_long() -> None:
    target = _Exec({"id": "d1", "done": False}, {"id": "d1", **DONE})
    GatewayControl(target).drain(60, 60)
    assert all(_wait_of(c) == "20.0" for c in target.calls)
