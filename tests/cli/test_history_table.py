"""`history` prints a header and aligned columns: follow's swaps, interrupted ones and their
rollbacks, gateway-only updates; the cause under its row."""

from __future__ import annotations

from composer.cli.status import format_history

EVENTS = [
    {"time": 0, "kind": "up", "source": None, "target": "baseline", "outcome": "started",
     "timings": {"total": 41.25}, "drained": None, "cause": None},
    {"time": 60, "kind": "up", "source": "baseline", "target": "mtp", "outcome": "swapped",
     "timings": {"total": 52.0}, "drained": {"finished": 3, "cut": 1, "continued": 4, "refused": 2}, "cause": None, "by": "follow"},
    {"time": 120, "kind": "up", "source": "mtp", "target": "dflash2", "outcome": "rolled back",
     "timings": {}, "drained": None, "cause": "dflash2 failed: interrupted; rolled back to mtp, which serves again"},
    {"time": 180, "kind": "up", "source": "mtp", "target": "mtp", "outcome": "gateway updated",
     "timings": {"total": 3.5}, "drained": None, "cause": None},
    {"time": 240, "kind": "down", "source": "mtp", "target": None, "outcome": "stopped"},
]  # fmt: skip


def test_history_is_a_table_with_follow_interrupted_and_rolled_back_swaps() -> None:
    lines = format_history(EVENTS).splitlines()
    assert lines[0].split() == [
        "TIME",
        "COMMAND",
        "FROM",
        "TO",
        "OUTCOME",
        "TOOK",
        "CUT",
        "CONTINUED",
        "REFUSED",
    ]
    rows = [line for line in lines[1:] if not line.startswith("  cause:")]
    outcome_at = lines[0].index("OUTCOME")
    assert all(row[outcome_at - 2 : outcome_at] == "  " for row in rows)  # aligned columns
    assert rows[0][outcome_at:].split()[:2] == ["started", "41.2s"]
    assert "up (follow)" in rows[1] and rows[1].split()[-3:] == ["1", "4", "2"]
    assert rows[0].split()[-3:] == ["-", "-", "-"]
    assert rows[2][outcome_at:].startswith("interrupted, rolled back to mtp")
    assert rows[3][outcome_at:].startswith("gateway updated")
    assert rows[4].split()[2:6] == ["down", "mtp", "-", "stopped"]
    assert lines[4] == "  cause: dflash2 failed: interrupted; rolled back to mtp, which serves again"
    assert format_history([]) == "no swaps recorded yet"
