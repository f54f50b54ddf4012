"""The stack's workload classes and aliases reach a live set through the rendered gateway
environment, also when the set is published to a gateway started for one variant."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from composer.gateway import GatewayControl
from composer.gateway.config import load_config
from composer.render.gateway import build_gateway_spec
from composer.render.spec import Var
from composer.stack.load import load_stack
from tests.conftest import REPO

from .fakes import GatewayThread, LocalExec
from .livelab import CHAT_TOKENS, KEY, Group, request, run_groups, start_sim

ROUTES = """
[variants.mtp]
aliases = ["fast"]
[workloads]
chat-1 = "mtp"
long-16 = "baseline"
"""
LONG_PROMPT = 5000


def rendered_routing(tmp_path: Path) -> dict[str, str]:
    """The gateway's routing variables as the stack renders them (spill off, no switching)."""
    extra = tmp_path / "routes.toml"
    extra.write_text(ROUTES, encoding="utf-8")
    spec = build_gateway_spec(load_stack([REPO / "composer.toml", extra], None, environ={}))
    assert spec is not None
    env = {}
    for name, value in spec.environment:
        parts = [p.default if isinstance(p, Var) else str(p) for p in value]
        env[name] = "".join(parts)
    assert "GATEWAY_SPILL" not in env and "GATEWAY_SWITCH_ON_MODEL" not in env
    return {k: env[k] for k in ("GATEWAY_WORKLOADS", "GATEWAY_ALIASES")}


@pytest.fixture
def sims(tmp_path: Path):
    started = [start_sim("baseline", tmp_path), start_sim("mtp", tmp_path)]
    yield started
    for sim in started:
        sim.stop()


def test_classes_route_chat_to_mtp_and_long_prompts_to_baseline(tmp_path: Path, sims) -> None:
    config = load_config(rendered_routing(tmp_path))
    base, mtp = sims
    gw = GatewayThread(
        "http://127.0.0.1:9", api_key=KEY, served_name="m", workloads=config.workloads, aliases=config.aliases
    ).start()
    try:
        control = GatewayControl(LocalExec(gw.config.control_socket))  # what `up baseline mtp` does
        control.set_upstreams(
            [
                {"name": "baseline/1", "variant": "baseline", "url": f"http://127.0.0.1:{base.port}"},
                {"name": "mtp/1", "variant": "mtp", "url": f"http://127.0.0.1:{mtp.port}"},
            ]
        )
        chat = Group("chat", gw.port, CHAT_TOKENS, 32, streams=1, requests=24)
        long = Group("long", gw.port, LONG_PROMPT, 32, streams=16, requests=64)
        run_groups(chat, long)
        assert chat.failed() == long.failed() == 0
        assert chat.served() == {"mtp/1": 24} and long.served() == {"baseline/1": 64}
        aliased = request(gw.port, LONG_PROMPT, 8, model="fast")
        assert (aliased.ok, aliased.served_by) == (True, "mtp/1")
        text = httpx.get(gw.url + "/gateway/metrics", timeout=10).text
        assert 'gateway_route_decisions_total{reason="class"} 88.0' in text
        assert 'gateway_route_decisions_total{reason="alias"} 1.0' in text
        balance = re.search(r'gateway_route_decisions_total\{reason="balance"\} (\S+)', text)
        assert balance is None or float(balance[1]) == 0.0
    finally:
        gw.stop()
