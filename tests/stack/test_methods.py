"""The speculative methods the stack accepts are exactly what vLLM 0.33.0 accepts, as the
simulator models it: its own list plus what the dflash overlay's diff adds."""

from __future__ import annotations

import importlib.util
import re

from composer.overlay.diff import parse_diff
from composer.stack.values import SPECULATIVE_METHODS
from tests.conftest import REPO

SIM_METHODS = REPO / "images/sim/src/vllm/config/speculative_methods.py"
OVERLAY_DIFF = REPO / "images/sim/overlay/sim-dflash.diff"


def _simulator_methods() -> set[str]:
    spec = importlib.util.spec_from_file_location("sim_speculative_methods", SIM_METHODS)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return set(module.SPECULATIVE_METHODS)


def _overlay_additions() -> set[str]:
    diff = parse_diff(OVERLAY_DIFF.name, OVERLAY_DIFF.read_bytes(), "vllm")
    (change,) = [c for c in diff.changes if c.path.endswith("config/speculative_methods.py")]
    added = set()
    for hunk in change.patch:
        for line in hunk:
            match = re.fullmatch(r'\s*"([a-z0-9_]+)",', line.value.rstrip("\n"))
            if line.is_added and match:
                added.add(match.group(1))
    return added


def test_stack_methods_equal_the_simulators_plus_the_overlay() -> None:
    base, added = _simulator_methods(), _overlay_additions()
    assert added == {"dflash"}
    assert not base & added, "the overlay adds a method the simulator already knows"
    assert set(SPECULATIVE_METHODS) == base | added
    assert len(SPECULATIVE_METHODS) == len(set(SPECULATIVE_METHODS))
