"""`up`'s outcome line carries the published port's gap when the gateway's container was
replaced, and never says all probes were answered when one failed."""

from __future__ import annotations

from composer.cli.swap import report_swap
from composer.swap.outcome import UpResult


def _report(capsys, port_gap: dict | None) -> str:
    result = UpResult("mtp", "gateway updated", timings={"total": 3.2}, port_gap=port_gap)
    report_swap("mtp", False, lambda _line: result)
    return capsys.readouterr().out.strip().splitlines()[-1]


def test_the_line_says_how_many_probes_the_port_refused(capsys) -> None:
    gap = {"seconds": 1.5, "probes": 63, "failed": 48, "watched": 1.8, "refused": 46, "silent": 2}
    line = _report(capsys, gap)
    assert line == (
        "mtp: gateway updated (3.2s); the port refused 48 of 63 probes over 1.50 s "
        "(46 refused, 2 silent; watched 1.80 s)"
    )
    assert "answered all" not in line and "0 cut" not in line


def test_no_gap_is_said_only_when_every_probe_was_answered_or_none_was_made(capsys) -> None:
    assert _report(capsys, {"seconds": 0, "probes": 9, "failed": 0, "watched": 0.2}).endswith(
        "; the port answered all 9 probes (watched 0.20 s)"
    )
    assert _report(capsys, None) == "mtp: gateway updated (3.2s)"
