"""Switching settings: aliases and the automatic policy are validated at load, one line, exit 2;
aliases and classes reach the gateway's environment, the switching settings only when switching
is on."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer.errors import ConfigError
from composer.render.gateway import build_gateway_spec
from composer.stack.gateway import GatewaySettings
from composer.stack.load import load_stack
from tests.conftest import REPO
from tests.stack.test_bad_input import refused

GOOD = """
[gateway]
switch_on_model = true
policy = "auto"
min_residency = "20s"
[variants.mtp]
aliases = ["fast"]
[variants.baseline]
aliases = ["plain", "org/plain:v1"]
[workloads]
chat-1 = "mtp"
long-16 = "baseline"
"""


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ('[variants.mtp]\naliases = ["claude-opus-5"]\n', "'claude-opus-5' is the served model name"),
        (
            '[variants.mtp]\naliases = ["fast"]\n[variants.baseline]\naliases = ["fast"]\n',
            "'fast' is also an alias of variant",
        ),
        ('[variants.mtp]\naliases = "fast"\n', "expected a list of model names"),
        ('[variants.mtp]\naliases = ["a b"]\n', "expected a list of model names"),
        (
            '[gateway]\npolicy = "sometimes"\n',
            "invalid gateway.policy = 'sometimes' (from bad.toml): expected one of manual, auto",
        ),
        ("[gateway]\nenabled = false\nswitch_on_model = true\n", "need the gateway"),
        ('[gateway]\nmin_residency = "soon"\n', "invalid gateway.min_residency"),
    ],
)
def test_bad_switching_settings_are_refused(tmp_path: Path, extra: str, expected: str) -> None:
    assert expected in refused(tmp_path, extra_toml=extra)


def test_auto_policy_without_classes_is_refused(tmp_path: Path) -> None:
    shipped = (REPO / "composer.toml").read_text(encoding="utf-8")
    stack_file = tmp_path / "composer.toml"
    stack_file.write_text(shipped.split("[workloads]")[0] + '[gateway]\npolicy = "auto"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"gateway.policy = 'auto' needs workload classes in \[workloads\]"):
        load_stack([stack_file], None, environ={})


def test_switching_settings_reach_the_gateway_environment(tmp_path: Path) -> None:
    override = tmp_path / "switch.toml"
    override.write_text(GOOD, encoding="utf-8")
    empty = tmp_path / "empty.env"
    empty.write_text("")
    stack = load_stack([REPO / "composer.toml", override], empty, environ={})
    assert stack.variants["mtp"].aliases == ("fast",)
    assert stack.variants["dflash2"].aliases == ()  # never inherited through extends
    env = {
        name: "".join(str(p) for p in value.parts) if hasattr(value, "parts") else str(value)
        for name, value in build_gateway_spec(stack).environment
    }
    assert "GATEWAY_ALIASES" in env and "fast=mtp" in env["GATEWAY_ALIASES"]
    assert "plain=baseline,org/plain:v1=baseline" in env["GATEWAY_ALIASES"]
    assert "chat-1:0:512:0:1=mtp" in env["GATEWAY_WORKLOADS"]
    plain = load_stack([REPO / "composer.toml"], empty, environ={})
    names = [name for name, _ in build_gateway_spec(plain).environment]
    assert "GATEWAY_ALIASES" not in names and "GATEWAY_POLICY" not in names  # no aliases, no switching
    assert "GATEWAY_WORKLOADS" in names  # the shipped classes, for live routing


@pytest.mark.parametrize(
    ("continue_streams", "drain", "continues"),
    [(True, False, True), (True, True, False), (False, False, False), (False, True, False)],
)
def test_a_switch_continues_streams_unless_turned_off_or_asked_to_drain(
    continue_streams: bool, drain: bool, continues: bool
) -> None:
    assert GatewaySettings(continue_streams=continue_streams).continues(drain) is continues
