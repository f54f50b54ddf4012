"""Switching configured with no follower attached, and a hold_timeout shorter than the start
budget: doctor warns, status says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer.doctor.report import CHECK_NAMES, fast_checks, run_doctor
from composer.doctor.switch_checks import check_follower, follower_warning, switching_configured
from composer.render.target import resolve_target
from composer.swap.status import format_status

from .fakes import make_stack
from .test_doctor import host

ALIASES = '[gateway]\nswitch_on_model = true\n[variants.mtp]\naliases = ["fast"]\n'
AUTO = '[gateway]\npolicy = "auto"\n[workloads]\nchat-1 = "mtp"\nlong-16 = "baseline"\n'


def test_what_configures_switching(tmp_path: Path) -> None:
    assert switching_configured(make_stack(tmp_path)) is None
    assert switching_configured(make_stack(tmp_path, ALIASES)) == "aliases of mtp with switch_on_model"
    auto = make_stack(tmp_path, AUTO)
    assert switching_configured(auto) == "policy = 'auto'"


@pytest.mark.parametrize(
    ("toml", "attached", "status"),
    [
        (ALIASES, False, "warn"),
        (ALIASES, True, "ok"),
        (ALIASES, None, None),  # the gateway could not be asked: nothing said
        (AUTO, False, "warn"),
        ("", False, None),  # no switching: a follower is not needed
    ],
)
def test_the_follower_check(tmp_path: Path, toml: str, attached: bool | None, status: str | None) -> None:
    found = check_follower(make_stack(tmp_path, toml), attached)
    assert (found.status if found else None) == status
    if status == "warn":
        assert found is not None and "no compose-spec follow is attached" in found.detail
        assert "compose-spec follow --print-systemd-unit" in found.fix


def test_doctor_reports_a_missing_follower(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, ALIASES)
    report = run_doctor(stack, "baseline", host(tmp_path), follower_attached=False)
    follower = [c for c in report.checks if c.name == "follower"]
    assert [c.status for c in follower] == ["warn"] and "follower" in CHECK_NAMES
    unknown = run_doctor(stack, "baseline", host(tmp_path))
    assert not [c for c in unknown.checks if c.name == "follower"]


def test_status_warns_when_no_follower_is_attached(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, ALIASES)
    warning = follower_warning(stack, False)
    assert warning is not None and follower_warning(stack, True) is None
    data = {"project": "p", "running": False, "last_exit": None, "warnings": [warning]}
    text = format_status(data)
    assert text.splitlines()[-1].startswith("warning       switching is configured (aliases of mtp")


@pytest.mark.parametrize(
    ("toml", "status"),
    [
        ('[stack]\nstart_period = "15m"\n[gateway]\nhold_timeout = "5m"\n', "warn"),
        ('[stack]\nstart_period = "15m"\n[gateway]\nhold_timeout = "15m"\n', "ok"),
        ('[stack]\nstart_period = "2m"\n[gateway]\nhold_timeout = "5m"\n', "ok"),
        ('[stack]\nstart_period = "15m"\n[gateway]\nenabled = false\nhold_timeout = "5m"\n', None),
    ],
)
def test_doctor_and_up_compare_hold_timeout_with_the_start_budget(
    tmp_path: Path, toml: str, status: str | None
) -> None:
    stack = make_stack(tmp_path, toml)
    report = run_doctor(stack, "baseline", host(tmp_path))
    found = [c.status for c in report.checks if c.name == "hold-timeout"]
    assert found == ([status] if status else []) and "hold-timeout" in CHECK_NAMES
    preflight = [
        c for c in fast_checks(stack, resolve_target(stack, "baseline"), None) if c.name == "hold-timeout"
    ]
    assert [c.status for c in preflight] == found
    if status == "warn":
        detail = preflight[0].detail
        assert detail.startswith(
            "[gateway] hold_timeout (5m) is shorter than the start budget start_period (15m)"
        )
        assert "at least 15m" in preflight[0].fix
