"""Settings applied in place: `PUT /settings` on a running in-process gateway validates the
whole set with the parser the gateway starts with, applies it to the running objects or
refuses it whole, shows it in `/state`, `GET /settings` and `/gateway/status`, and keeps it
for a restart of the same container (not for a container started with other settings)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from composer.errors import GatewayConfigError, GatewayControlError
from composer.gateway import GatewayControl
from composer.gateway.config import LIVE, load_config

from .conftest import KEY
from .fakes import GatewayThread, InProcessExec

START = {"GATEWAY_MAX_HELD": "256", "GATEWAY_HOLD_TIMEOUT": "300"}


def _settings_gateway(
    backend, state_dir: str, env: dict[str, str] = START, container: str = "a"
) -> GatewayThread:
    """A gateway whose settings come from an environment, as in its container (`container`:
    its own file system, where the control socket and the container's identity live)."""
    config = load_config({**env, "VLLM_API_KEY": KEY, "GATEWAY_STATE_DIR": state_dir})
    fields = {k: getattr(config, k) for k in ("max_held", "hold_timeout", "settings", "state_dir", "api_key")}
    own = Path(state_dir) / f"container-{container}"
    own.mkdir(exist_ok=True)
    return GatewayThread(backend.url, control_socket=str(own / "control.sock"), **fields).start()


def test_settings_apply_to_the_running_gateway_and_show_everywhere(make_gateway) -> None:
    gw = make_gateway(max_held=256, hold_timeout=300.0)
    ctl = GatewayControl(InProcessExec(gw.config.control_socket))
    applied = ctl.apply_settings(
        {
            "GATEWAY_MAX_HELD": "250",
            "GATEWAY_STALL_TIMEOUT": "7",
            "GATEWAY_HEAD_TIMEOUT": "4",
            "GATEWAY_ALIASES": "fast=mtp",
            "GATEWAY_SWITCH_ON_MODEL": "true",
        }
    )
    assert applied["GATEWAY_MAX_HELD"] == "250"
    g = gw.gateway
    assert (g.gate.max_held, g.proxy.stall_timeout, gw.server.protocol.registry.limits.head_timeout) == (
        250,
        7.0,
        4.0,
    )
    assert g.switcher.aliases == {"fast": "mtp"} and g.proxy.aliases == {"fast": "mtp"}
    assert g.gate.hold_timeout == 300.0  # not named: unchanged
    assert ctl.state().raw["settings"]["GATEWAY_MAX_HELD"] == "250"
    status = httpx.get(f"{gw.url}/gateway/status", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert status["settings"]["GATEWAY_MAX_HELD"] == 250
    assert status["settings"]["GATEWAY_ALIASES"] == {"fast": "mtp"}
    assert "VLLM_API_KEY" not in str(status["settings"]) and KEY not in str(status["settings"])


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"GATEWAY_MAX_HELD": "250", "GATEWAY_HOLD_TIMEOUT": "0s"}, "GATEWAY_HOLD_TIMEOUT='0s' is invalid"),
        ({"GATEWAY_MAX_HELD": "250", "GATEWAY_PORT": "9000"}, "GATEWAY_PORT cannot change in a running"),
        ({"GATEWAY_MAX_HELD": "250", "GATEWAY_POLICY": "auto"}, "GATEWAY_POLICY=auto needs"),
        ({"GATEWAY_MAX_HELD": 250}, "must be a string"),
    ],
)
def test_a_bad_setting_refuses_the_whole_change(make_gateway, changes, named) -> None:
    gw = make_gateway(max_held=256)
    ctl = GatewayControl(InProcessExec(gw.config.control_socket))
    with pytest.raises(GatewayControlError) as refused:
        ctl.apply_settings(changes)
    assert named in str(refused.value) and "\n" not in str(refused.value)
    assert gw.gateway.gate.max_held == 256 and gw.gateway.config.max_held == 256


def test_a_restart_of_the_same_container_keeps_the_settings(backend, tmp_path) -> None:
    gw = _settings_gateway(backend, str(tmp_path))
    try:
        GatewayControl(InProcessExec(gw.config.control_socket)).apply_settings({"GATEWAY_MAX_HELD": "250"})
    finally:
        gw.stop()
    again = _settings_gateway(backend, str(tmp_path))  # same environment, same host: a restart
    try:
        assert again.gateway.gate.max_held == 250
        assert dict(again.gateway.config.settings)["GATEWAY_MAX_HELD"] == "250"
    finally:
        again.stop()
    other = _settings_gateway(backend, str(tmp_path), {"GATEWAY_MAX_HELD": "100"})  # other settings
    try:
        assert other.gateway.gate.max_held == 100
    finally:
        other.stop()
    # a new container with the same environment (a replacement, which shares the port holder's
    # host name): it starts from its own environment, not from what was applied to the old one
    new = _settings_gateway(backend, str(tmp_path), container="b")
    try:
        assert new.gateway.gate.max_held == 256
    finally:
        new.stop()


def test_every_live_setting_is_a_field_and_refusals_name_the_allowed_values() -> None:
    config = load_config({})
    assert set(config.live_values()) == set(LIVE)
    with pytest.raises(GatewayConfigError, match=r"GATEWAY_MAX_CONNECTIONS='0' .* from 1 to 1000000$"):
        config.with_settings({"GATEWAY_MAX_CONNECTIONS": "0"})
    changed = config.with_settings({"GATEWAY_POLICY": "auto", "GATEWAY_WORKLOADS": "chat:0:512:0:1=mtp"})
    assert changed.policy == "auto" and changed.live_values() != config.live_values()
    assert changed.with_settings({"GATEWAY_POLICY": "", "GATEWAY_WORKLOADS": ""}).live_values() == (
        config.live_values()
    )
