"""`ls` marks every variant that serves (each member of a live set) and each one asleep; `ps`
shows a live member's health as the gateway's readiness poll sees it, not Docker's slower
healthcheck (which says `starting` long after the member serves)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from composer.swap import snapshot
from composer.swap.ps import ps_rows
from composer.swap.snapshot import LiveRunning, Member, Snapshot
from composer.swap.status import format_variants, variants_data
from tests.swap.test_plan_units import _info
from tests.swap.test_standby_units import _stack


class _Container:
    def __init__(self, name: str, health: str = "starting", **labels: str) -> None:
        self.name, self.status, self.labels = name, "running", labels
        self.attrs = {"NetworkSettings": {"Ports": {}}, "State": {"Health": {"Status": health}}}


def _live(name: str, variant: str) -> LiveRunning:
    return LiveRunning(name, variant, f"p-{variant}-live-1", "0", "h", "running", f"{variant}-live")


class _Engine:
    """A Docker client whose images are all missing (ls asks only that of it here)."""

    class images:  # the SDK's attribute
        @staticmethod
        def get(ref: str) -> None:
            from docker.errors import ImageNotFound

            raise ImageNotFound(ref)


def _state(**ready: bool) -> SimpleNamespace:
    upstreams = [{"name": name.replace("_", "/"), "ready": is_ready} for name, is_ready in ready.items()]
    return SimpleNamespace(raw={"upstreams": upstreams}, upstream=None)


def test_ps_shows_a_ready_live_member_as_serving_whatever_dockers_check_says() -> None:
    live = (_live("baseline/1", "baseline"), _live("mtp/1", "mtp"))
    snap = Snapshot("p", (), live=live, gateway_state=_state(baseline_1=True, mtp_1=False))  # type: ignore[arg-type]
    rows = ps_rows(snap, [_Container("p-baseline-live-1"), _Container("p-mtp-live-1")])
    assert [r["state"] for r in rows] == ["serving (ready)", "running (not ready)"]
    unknown = ps_rows(replace(snap, gateway_state=None), [_Container("p-mtp-live-1")])
    assert unknown[0]["state"] == "running (starting)"  # no gateway answer: Docker's word
    # the serving container that joined the set as it ran (`baseline/1`, not labelled live)
    joined = replace(_info("baseline", service="vllm", sleep_mode=False), docker_health="starting")
    member = Member(_Box(joined.name), joined, False, None, serving=True)  # type: ignore[arg-type]
    first = LiveRunning("baseline/1", "baseline", joined.name, "0", "h", "running", "vllm")
    mixed = Snapshot("p", (member,), live=(first,), gateway_state=_state(baseline_1=True))  # type: ignore[arg-type]
    assert ps_rows(mixed, [])[0]["state"] == "serving (ready)"


def test_ls_marks_each_member_of_a_live_set(monkeypatch: pytest.MonkeyPatch) -> None:
    live = (_live("baseline/1", "baseline"), _live("mtp/1", "mtp"))
    snap = Snapshot("p", (), live=live, gateway_state=_state(baseline_1=True, mtp_1=True))  # type: ignore[arg-type]
    monkeypatch.setattr(snapshot, "take", lambda *a, **k: snap)
    rows = variants_data(_stack(), _Engine())  # type: ignore[arg-type]
    assert sorted(r["variant"] for r in rows if r["serving"]) == ["baseline", "mtp"]
    marked = [line.split()[1] for line in format_variants(rows).splitlines()[1:] if line.startswith("*")]
    assert sorted(marked) == ["baseline", "mtp"]


def test_ls_marks_a_sleeping_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    serving = _info("mtp", service="vllm-mtp", sleep_mode=True)
    sleeping = _info("baseline", service="vllm-baseline", sleep_mode=True)
    members = (
        Member(_Box(serving.name), serving, True, False, serving=True),  # type: ignore[arg-type]
        Member(_Box(sleeping.name), sleeping, True, True, asleep=True),  # type: ignore[arg-type]
    )
    monkeypatch.setattr(snapshot, "take", lambda *a, **k: Snapshot("p", members))
    rows = variants_data(_stack(), _Engine())  # type: ignore[arg-type]
    text = format_variants(rows).splitlines()
    assert next(line for line in text if line.split()[1:2] == ["baseline"]).startswith("z ")
    assert next(line for line in text if line.split()[1:2] == ["mtp"]).startswith("* ")
    assert "* serves now: mtp" in text
    assert any(line.startswith("z asleep: baseline") for line in text)


class _Box:
    def __init__(self, name: str) -> None:
        self.name = name
        self.container = _Container(name)
