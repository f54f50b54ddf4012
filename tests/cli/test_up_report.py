"""`up` as a user reads it: the last line gives the switch's own time (the probation apart) and
what the requests in flight got; warnings about the stack come before the switch, once per
stack; Ctrl-C during the probation is no failure of the variant and shows no log as one."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from composer.cli.swap import report_swap
from composer.doctor.preflight import Finding
from composer.swap import evidence, swapper
from composer.swap.outcome import UpResult

GDN = "the model has linear-attention (GDN) layers: with MTP vLLM reserves an extra state block"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def _result(**fields) -> UpResult:
    return UpResult(**{"variant": "mtp", "outcome": "swapped", "timings": {"total": 7.5}, **fields})


def _out(capsys) -> str:
    return capsys.readouterr().out.strip().splitlines()[-1]


def test_the_last_line_gives_the_switchs_own_time_and_what_clients_got(capsys) -> None:
    drained = {"finished": 1, "cut": 0, "continued": 2, "refused": 0}
    timings = {"total": 38.8, "probation": 31.3}
    report_swap("mtp", False, lambda _line: _result(timings=timings, drained=drained))
    assert _out(capsys) == (
        "mtp: swapped (switch 7.5s, then 31.3s on probation); in flight: 2 streams continued, 1 finished, 0 cut"
    )
    idle = dict.fromkeys(drained, 0)
    report_swap("mtp", False, lambda _line: _result(drained=idle))
    assert _out(capsys) == "mtp: swapped (7.5s); no request was in flight"
    live = {"cut": 1, "continued": 1, "refused": 0}  # a live change counts no finished requests
    report_swap("a+b", False, lambda _line: _result(outcome="changed", drained=live))
    assert _out(capsys) == "a+b: changed (7.5s); in flight: 1 stream continued, 1 cut"


def _swap_saying(warnings: list[str]):
    """A swap whose preflight says `warnings` (as swapper.preflight_warnings does), then runs."""

    def run(line):
        ctx = SimpleNamespace(say=line.step, stack=SimpleNamespace(gpus=None), client=None)
        ctx.options = SimpleNamespace(allow_weak_key=False)
        snap = SimpleNamespace(members=(), gateway=None)
        found = swapper.preflight_warnings(ctx, [object()], snap)  # type: ignore[arg-type, list-item]
        line.step("draining the gateway")
        return _result(warnings=found, notes=["no GPUs configured: GPU release wait skipped"])

    return run


def test_warnings_about_the_stack_come_before_the_switch_once_per_stack(monkeypatch, capsys) -> None:
    findings = [Finding("gdn", "warn", GDN, "expect less KV cache"), Finding("ok", "ok", "fine")]
    monkeypatch.setattr(swapper, "fast_checks", lambda *a, **k: findings)
    report_swap("mtp", False, _swap_saying([GDN]), project="p1")
    err = capsys.readouterr().err.splitlines()
    said = f"warning: {GDN}: expect less KV cache"
    assert err == [said, "note: no GPUs configured: GPU release wait skipped", "draining the gateway"]
    report_swap("mtp", False, _swap_saying([GDN]), project="p1")  # the next swap of the stack
    assert capsys.readouterr().err.splitlines() == ["draining the gateway"]
    report_swap("mtp", True, _swap_saying([GDN]), project="p1")
    out = capsys.readouterr().out
    assert json.loads(out)["warnings"] == [f"{GDN}: expect less KV cache"]  # --json lists it every time
    report_swap("mtp", False, _swap_saying([GDN]), project="p2")  # another stack: said again
    assert capsys.readouterr().err.splitlines()[0] == said


def test_ctrl_c_during_the_probation_shows_no_log_as_a_failure() -> None:
    said: list[str] = []
    stack = SimpleNamespace(project="p", api_key="k")
    engine = SimpleNamespace(containers=SimpleNamespace(list=lambda **_: []))
    healthy = "\n".join(f"INFO 200 OK /v1/chat/completions {i}" for i in range(40))
    evidence.keep(stack, engine, "mtp", "interrupted", healthy, said.append)  # type: ignore[arg-type]
    assert said == ["mtp interrupted", "removing mtp"]
    said.clear()
    evidence.keep(stack, engine, "mtp", "exit code 1", "boom", said.append)  # type: ignore[arg-type]
    assert said[0] == "mtp failed: exit code 1" and "boom" in said[1]


def test_an_interrupted_swap_exits_130_without_a_log_tail_or_hints(capsys) -> None:
    from composer.cli.base import ComposeSpecGroup
    from composer.errors import SwapFailed

    failure = SwapFailed("mtp failed: interrupted; rolled back to baseline, which serves again")
    failure.log_tail, failure.hints = "INFO 200 OK\n" * 40, ("raise --timeout",)
    failure.__cause__ = KeyboardInterrupt()
    with pytest.raises(SystemExit) as done:
        ComposeSpecGroup._exit(failure, as_json=False)
    assert done.value.code == 130
    assert capsys.readouterr().err == f"compose-spec: error: {failure}\n"
