"""The live set as `status` and `ls` show it: every live container with its GPUs, readiness,
outstanding requests and what it served (the last minute when the gateway reports it).

The snapshot says which containers run and on which GPUs (labels); the gateway's state says,
per upstream, ready, outstanding, served and errors. A field the gateway does not report
is None, shown as "-".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from composer.swap.transaction import upstream_states

if TYPE_CHECKING:
    from composer.swap.snapshot import Snapshot


def _number(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def live_rows(snap: Snapshot) -> list[dict[str, object]]:
    """One row per live container of the snapshot (with the gateway's state it read)."""
    if not snap.live:
        return []
    states = upstream_states(snap.gateway_state.raw if snap.gateway_state else None)
    rows = []
    for member in snap.live:
        state = states.get(member.name, {})
        ready = state.get("ready")
        rows.append(
            {
                "name": member.name,
                "variant": member.variant,
                "container": member.container,
                "state": member.status,
                "gpus": member.gpus,
                "routed": member.name in states if states else None,
                "ready": ready if isinstance(ready, bool) else None,
                "outstanding": _number(state.get("outstanding")),
                "served": _number(state.get("served")),
                "served_last_minute": _number(state.get("served_1m")),
                "errors": _number(state.get("errors")),
            }
        )
    return rows


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def format_live(rows: list[dict[str, object]]) -> str:
    """The live containers as a table ("-": not reported by the gateway)."""
    keys = ("name", "container", "state", "gpus", "ready", "outstanding", "served_last_minute", "served")
    table = [["LIVE", "CONTAINER", "STATE", "GPUS", "READY", "OUTSTANDING", "SERVED/1M", "SERVED", "ERRORS"]]
    table += [[_cell(row[key]) for key in (*keys, "errors")] for row in rows]
    return aligned(table)


def aligned(table: list[list[str]]) -> str:
    """Rows of cells as text, each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table)
