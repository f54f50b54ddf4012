"""The gateway's connection limits: `[gateway]` keys (and their variables) validated at load, one
line, exit 2; valid ones reach the gateway's environment as `${VAR:-value}`."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer.render.gateway import build_gateway_spec
from composer.render.spec import resolve
from composer.stack.load import load_stack
from tests.conftest import REPO
from tests.stack.test_bad_input import refused


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("[gateway]\nmax_head_bytes = 100\n", "invalid gateway.max_head_bytes = 100"),
        ('[gateway]\nmax_head_bytes = "1GiB"\n', "a size from 1KiB to 16MiB"),
        ("[gateway]\nhead_timeout = 0\n", "invalid gateway.head_timeout = 0"),
        ('[gateway]\nkeep_alive_timeout = "2h"\n', "a duration from 1s to 1h"),
        ("[gateway]\nmax_connections = 0\n", "invalid gateway.max_connections = 0"),
        ('[gateway]\nstall_timeout = "2d"\n', "0 or a duration up to 24h"),
        ('[gateway]\nhold_keepalive = "2h"\n', "0 or a duration up to 1h"),
        ("[gateway]\nbody_timeout = 0\n", "invalid gateway.body_timeout = 0"),
        ('[gateway]\nunresponsive_timeout = "2h"\n', "0 or a duration up to 1h"),
    ],
)
def test_bad_limits_are_refused(tmp_path: Path, extra: str, expected: str) -> None:
    assert expected in refused(tmp_path, extra_toml=extra)


def test_limits_reach_the_gateway_environment(tmp_path: Path) -> None:
    override = tmp_path / "limits.toml"
    override.write_text(
        '[gateway]\nmax_head_bytes = "128KiB"\nhead_timeout = "30s"\nkeep_alive_timeout = 2\nmax_connections = 64\n'
        'stall_timeout = "5m"\nhold_keepalive = 0\nbody_timeout = "2m"\nunresponsive_timeout = 0\n'
    )
    empty = tmp_path / "empty.env"
    empty.write_text("")
    stack = load_stack([REPO / "composer.toml", override], empty, environ={})
    env = {name: resolve(value) for name, value in build_gateway_spec(stack).environment}
    assert env["GATEWAY_MAX_HEAD_BYTES"] == "131072"
    assert env["GATEWAY_HEAD_TIMEOUT"] == "30"
    assert env["GATEWAY_KEEP_ALIVE_TIMEOUT"] == "2"
    assert env["GATEWAY_MAX_CONNECTIONS"] == "64"
    assert env["GATEWAY_STALL_TIMEOUT"] == "300"
    assert env["GATEWAY_HOLD_KEEPALIVE"] == "0"
    assert env["GATEWAY_BODY_TIMEOUT"] == "120"
    assert env["GATEWAY_UNRESPONSIVE_TIMEOUT"] == "0"
    from_env = load_stack([REPO / "composer.toml"], empty, environ={"GATEWAY_MAX_CONNECTIONS": "99"})
    assert from_env.gateway.max_connections == 99


def test_continue_streams_reaches_the_gateway_only_when_off(tmp_path: Path) -> None:
    empty = tmp_path / "empty.env"
    empty.write_text("")
    stack = load_stack([REPO / "composer.toml"], empty, environ={})
    assert stack.gateway.continue_streams
    assert "GATEWAY_CONTINUE_STREAMS" not in dict(build_gateway_spec(stack).environment)  # on: absent
    off = load_stack([REPO / "composer.toml"], empty, environ={"GATEWAY_CONTINUE_STREAMS": "false"})
    env = {name: resolve(value) for name, value in build_gateway_spec(off).environment}
    assert env["GATEWAY_CONTINUE_STREAMS"] == "false"
    assert "invalid gateway.continue_streams" in refused(
        tmp_path, extra_toml='[gateway]\ncontinue_streams = "maybe"\n'
    )


@pytest.mark.parametrize(
    ("toml", "hold", "source"),
    [
        ('[stack]\nstart_period = "15m"\n', 900, "default (stack.start_period)"),
        ('[stack]\nstart_period = "2m"\n', 300, "default"),
        ('[stack]\nstart_period = "15m"\n[gateway]\nhold_timeout = "5m"\n', 300, "hold.toml"),
    ],
)
def test_the_default_hold_timeout_follows_the_start_budget(
    tmp_path: Path, toml: str, hold: int, source: str
) -> None:
    override = tmp_path / "hold.toml"
    override.write_text(toml)
    empty = tmp_path / "empty.env"
    empty.write_text("")
    stack = load_stack([REPO / "composer.toml", override], empty, environ={})
    assert stack.gateway.hold_timeout == hold
    assert stack.sources["gateway.hold_timeout"] == source
    env = {name: resolve(value) for name, value in build_gateway_spec(stack).environment}
    assert env["GATEWAY_HOLD_TIMEOUT"] == str(hold)
