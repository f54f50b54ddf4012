"""Status wording, `--since` parsing and the kept failure log, without Docker."""

from __future__ import annotations

import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from composer.errors import UsageError
from composer.swap import evidence
from composer.swap.logs import parse_since
from composer.swap.status import NO_KEY, UNAUTHORIZED, docker_disagrees, format_status, format_variants

RUNNING = {
    "project": "p",
    "running": True,
    "variant": "mtp",
    "container": "p-vllm-1",
    "image": "img",
    "health": "ready",
    "health_detail": "",
    "docker_health": "starting",
    "uptime_seconds": 12.0,
    "restart_count": 0,
    "last_exit": None,
    "port": 8000,
    "url": "http://127.0.0.1:8000",
    "served_model_name": "m",
    "config_hash": "h",
    "matches_stack": True,
    "stopped": [],
}


def test_docker_starting_after_a_swap_is_not_shown() -> None:
    text = format_status(RUNNING)
    assert "health        ready\n" in text and "docker" not in text and "matches stack" not in text


@pytest.mark.parametrize(
    ("health", "docker", "shown"),
    [
        ("ready", "starting", False),
        ("ready", "healthy", False),
        ("ready", None, False),
        ("ready", "unhealthy", True),
        ("not ready", "healthy", True),
        ("not ready", "starting", False),
    ],
)
def test_docker_health_only_when_it_disagrees(health: str, docker: str | None, shown: bool) -> None:
    assert docker_disagrees(health, docker) is shown


def test_wrong_key_says_so_instead_of_not_ready() -> None:
    data = {**RUNNING, "health": "unauthorized", "health_detail": UNAUTHORIZED}
    text = format_status(data)
    assert "health        401: the key does not match the running container's" in text
    assert "not ready" not in text and "changed" not in text
    assert NO_KEY.startswith("401: VLLM_API_KEY is not set")


def test_a_changed_stack_says_what_to_do() -> None:
    text = format_status({**RUNNING, "matches_stack": False})
    assert (
        "matches stack no: this stack now renders mtp differently (`compose-spec up mtp` applies it)" in text
    )


def test_crashed_variant_is_reported_with_code_time_and_log() -> None:
    data = {
        "project": "p",
        "running": False,
        "variant": None,
        "stopped": ["p-vllm-1"],
        "last_exit": {
            "variant": "mtp",
            "container": "p-vllm-1",
            "state": "crashed",
            "exit_code": 1,
            "finished_at": "2025-01-01T10:00:00+00:00",
            "seconds_ago": 125.0,
            "restart_count": 0,
            "log_tail": "line one\nEngineDeadError: boom",
        },
    }
    text = format_status(data)
    assert "mtp crashed: exit code 1 at 2025-01-01T10:00:00+00:00 (2m05s ago)" in text
    assert "  EngineDeadError: boom" in text
    assert format_status({**data, "last_exit": None}) == "project p: no variant is running"


def test_variants_table_marks_the_serving_one() -> None:
    rows = [
        {"variant": "baseline", "method": None, "k": None, "image": "a", "image_present": True,
         "serving": False, "workloads": ["long-16"], "description": ""},
        {"variant": "mtp", "method": "mtp", "k": 7, "image": "a", "image_present": False,
         "serving": True, "workloads": [], "aliases": ["fast", "opus-fast"], "description": ""},
    ]  # fmt: skip
    lines = format_variants(rows).splitlines()
    assert lines[0].split() == ["VARIANT", "METHOD", "K", "IMAGE", "PRESENT", "WORKLOADS", "ALIASES"]
    assert lines[1].split() == ["baseline", "-", "-", "a", "yes", "long-16", "-"]
    assert lines[2].split() == ["*", "mtp", "mtp", "7", "a", "no", "-", "fast,opus-fast"]
    assert lines[-1] == "* serves now: mtp"


def test_since_accepts_durations_times_and_unix_seconds() -> None:
    now = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
    assert parse_since("10m", now) == now - timedelta(minutes=10)
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("90s", now) == now - timedelta(seconds=90)
    assert parse_since("2025-05-01T10:00:00Z", now) == datetime(2025, 5, 1, 10, 0, tzinfo=UTC)
    assert parse_since("1746093600", now) == datetime(2025, 5, 1, 10, 0, tzinfo=UTC)
    with pytest.raises(UsageError, match="--since 'yesterday': expected a duration such as 90s"):
        parse_since("yesterday", now)


def test_failure_log_is_kept_private_bounded_and_redacted(tmp_path: Path) -> None:
    key = "sk-secret-key-0123456789"
    log = "".join(f"line {i} {key}\n" for i in range(50_000))
    path = evidence.save_failure("proj", "mtp", f"exited ({key})", log, key, directory=tmp_path)
    saved = evidence.last_failure("proj", directory=tmp_path)
    assert saved is not None and saved.variant == "mtp" and saved.truncated
    assert key not in saved.log and key not in saved.cause and "********" in saved.log
    assert len(saved.log.encode()) <= evidence.MAX_BYTES
    assert saved.log.startswith("line ") and saved.log.endswith("line 49999 ********\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert evidence.last_failure("other", directory=tmp_path) is None
