"""One validation of every gateway setting: the stack refuses what the gateway would refuse at
start (the bounds live in composer.gateway.config.LIMITS), so an `up` never recreates a gateway
that crash-loops on its own settings."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from composer.cli import main
from composer.errors import ConfigError
from composer.gateway.config import LIMITS, load_config
from composer.render.gateway import build_gateway_spec
from composer.render.spec import resolve
from composer.stack.gateway import GATEWAY_SETTINGS
from composer.stack.load import load_stack
from tests.conftest import REPO

BOUNDED = [(key, env) for key, env, *_ in GATEWAY_SETTINGS if env in LIMITS]


def _stack(tmp_path: Path, *flags: str):
    empty = tmp_path / "empty.env"
    empty.write_text("")
    return load_stack([REPO / "composer.toml"], empty, environ={}, flags=list(flags))


def test_every_setting_the_gateway_bounds_is_checked_by_the_stack() -> None:
    keys = {key for key, _ in BOUNDED}
    assert {"hold_timeout", "max_held", "drain_timeout", "head_timeout", "spill"} <= keys


@pytest.mark.parametrize(("key", "env"), BOUNDED)
def test_the_stack_refuses_past_the_gateways_bounds_and_the_gateway_takes_what_it_passes(
    tmp_path: Path, key: str, env: str
) -> None:
    low, high = LIMITS[env]
    with pytest.raises(ConfigError, match=f"gateway.{key}"):
        _stack(tmp_path, f"gateway.{key}={math.floor(high) + 1}")
    top = _stack(tmp_path, f"gateway.{key}={math.floor(high)}")
    assert load_config({env: str(getattr(top.gateway, key))})  # the gateway starts with it
    if low > 0:
        below = math.ceil(low) - 1
        with pytest.raises(ConfigError, match=f"gateway.{key}"):
            _stack(tmp_path, f"gateway.{key}={below}")


@pytest.mark.parametrize("value", ["0s", "0", "25h", "90000"])
def test_hold_timeout_outside_the_gateways_range_is_refused_with_the_allowed_form(
    tmp_path: Path, value: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        _stack(tmp_path, f"gateway.hold_timeout={value}")
    assert "gateway.hold_timeout" in str(refused.value)
    assert "a duration from 1s to 24h" in str(refused.value)


def test_the_default_hold_timeout_follows_a_long_start_budget_only_up_to_the_gateways_bound(
    tmp_path: Path,
) -> None:
    stack = _stack(tmp_path, "stack.start_period=30h")
    assert stack.gateway.hold_timeout == 86400
    env = {name: resolve(value) for name, value in build_gateway_spec(stack).environment}
    assert load_config(env).hold_timeout == 86400


@pytest.mark.parametrize("command", [["config"], ["up", "mtp", "--dry-run"], ["up", "mtp"]])
def test_hold_timeout_0s_is_refused_before_anything_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")  # fails loudly if reached
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    override = tmp_path / "hold.toml"
    override.write_text('[gateway]\nhold_timeout = "0s"\n')
    env_file = tmp_path / "key.env"
    env_file.write_text("VLLM_API_KEY=sk-bounds-test-key-0123456789abcdef\n")
    args = ["--env-file", str(env_file), "--stack", str(REPO / "composer.toml"), "--stack", str(override)]
    result = CliRunner().invoke(main, [*args, *command], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "gateway.hold_timeout" in lines[0] and "from 1s to 24h" in lines[0], lines
    assert not (tmp_path / "state").exists(), "nothing written before the refusal"
