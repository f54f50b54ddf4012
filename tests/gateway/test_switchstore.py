"""The switch history on disk: bounded JSON lines, written atomically, read back after a
restart; what cannot be read is skipped, and a failed write never raises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from composer.errors import GatewayConfigError
from composer.gateway.config import load_config
from composer.gateway.control.switchlog import SwitchLog
from composer.gateway.control.switchstore import FILE_NAME, SwitchStore


def _switch(log: SwitchLog, to: str, hold: str) -> None:
    log.begin(to, "baseline", "compose-spec up")
    log.drained(hold, 0, 0)
    log.released([hold], {"serving": to, "ok": True, "detail": "swapped"})


def test_a_new_log_starts_with_the_saved_history(tmp_path: Path) -> None:
    store = SwitchStore(tmp_path, keep=3)
    log = SwitchLog(keep=3, history=store.load(), on_finish=store.save)
    for i in range(5):
        _switch(log, f"v{i}", f"h{i}")
    lines = (tmp_path / FILE_NAME).read_text().splitlines()
    assert [json.loads(line)["to"] for line in lines] == ["v2", "v3", "v4"]  # bounded, oldest first
    assert not [p for p in tmp_path.iterdir() if p.name != FILE_NAME]  # no temporary file left

    again = SwitchLog(keep=3, history=SwitchStore(tmp_path, keep=3).load())
    assert again.snapshot()["recent"] == log.snapshot()["recent"]
    assert [s["to"] for s in again.snapshot()["recent"]] == ["v4", "v3", "v2"]


def test_unreadable_lines_are_skipped_and_a_missing_file_is_an_empty_history(tmp_path: Path) -> None:
    store = SwitchStore(tmp_path, keep=50)
    assert store.load() == []
    (tmp_path / FILE_NAME).write_text(
        '{"to": "mtp", "outcome": "ok"}\nnot json\n[1]\n{"to": 3}\n{"to": "dflash2"'
    )
    assert store.load() == [{"to": "mtp", "outcome": "ok"}]


def test_a_failed_write_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SwitchStore(tmp_path / "missing", keep=5)
    log = SwitchLog(on_finish=store.save)
    _switch(log, "mtp", "h1")
    assert log.snapshot()["recent"][0]["to"] == "mtp"
    assert "cannot save the switch history" in caplog.text


def test_the_state_dir_must_be_absolute() -> None:
    assert load_config({"GATEWAY_STATE_DIR": "/var/lib/gateway"}).state_dir == "/var/lib/gateway"
    assert load_config({}).state_dir == ""
    with pytest.raises(
        GatewayConfigError, match="GATEWAY_STATE_DIR='state' is invalid; allowed: an absolute"
    ):
        load_config({"GATEWAY_STATE_DIR": "state"})
