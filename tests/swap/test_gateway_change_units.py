"""The host's decision about a running gateway (`swap.gateway_change`): settings applied in
place when only live settings differ, compared with what the gateway reports in effect (never
its stale environment); a new container when its image changed or the gateway cannot say;
`--dry-run`'s plan text says which, and why."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import yaml

from composer.render.gateway import build_gateway_spec
from composer.render.spec import resolve
from composer.stack.load import load_stack
from composer.swap import gateway_change
from composer.swap.plan import GatewayChange, Plan
from tests.conftest import REPO

KEY = "sk-" + "k" * 40
OLD_STATE = b'{"upstream": "x", "open": true, "backend_ready": true, "held": 0, "inflight": 0, "holds": []}'


def _setup(tmp_path: Path, reported: dict[str, str] | None, image_id: str = "sha256:same"):
    stack = load_stack([REPO / "composer.toml"], None, environ={"VLLM_API_KEY": KEY})
    spec = build_gateway_spec(stack)
    assert spec is not None
    env = {name: resolve(value) for name, value in spec.environment}
    created = {**env, "GATEWAY_MAX_HELD": "256", "VLLM_API_KEY": KEY}  # created before max_held=250
    old, new = tmp_path / "old.yml", tmp_path / "new.yml"
    for path, service_env in ((old, created), (new, {**env, "GATEWAY_MAX_HELD": "250"})):
        service = {
            "image": "gw:1",
            "environment": {k: v for k, v in service_env.items() if k != "VLLM_API_KEY"},
        }
        path.write_text(yaml.safe_dump({"services": {"gateway": service}}))
    images = SimpleNamespace(get=lambda name: SimpleNamespace(id=image_id))
    binding = {"HostIp": stack.bind_address, "HostPort": str(stack.port)}
    holder = SimpleNamespace(id="holder", attrs={"HostConfig": {"PortBindings": {"8000/tcp": [binding]}}})
    containers = SimpleNamespace(get=lambda name: holder if name == "holder" else None)
    container = SimpleNamespace(
        attrs={
            "Config": {"Env": [f"{k}={v}" for k, v in created.items()], "Image": "gw:1"},
            "Image": "sha256:same",
            "HostConfig": {"NetworkMode": "container:holder"},  # it joins the port holder's network
        },
        labels={"com.docker.compose.project.config_files": str(old)},
        client=SimpleNamespace(images=images, containers=containers),
        holder=holder,
    )
    state = None if reported is None else SimpleNamespace(raw={"settings": reported})
    snap = SimpleNamespace(gateway=container, gateway_running=True, gateway_state=state)
    return stack, spec, new, snap, env


def test_a_changed_live_setting_is_applied_in_place_and_then_matches(tmp_path: Path) -> None:
    stack, spec, new, snap, env = _setup(tmp_path, reported={})
    snap.gateway_state.raw["settings"] = {**env, "GATEWAY_MAX_HELD": "256"}
    spec_250 = spec.__class__(
        **{**spec.__dict__, "environment": (*spec.environment, ("GATEWAY_MAX_HELD", ("250",)))}
    )
    change = gateway_change.decide(stack, spec_250, new, snap)
    assert change.in_place and change.changed == ("GATEWAY_MAX_HELD",) and not change.recreate
    assert dict(change.settings)["GATEWAY_MAX_HELD"] == "250"
    # the next `up`: the gateway reports 250 (its environment still says 256): nothing differs
    reported = {**env, "GATEWAY_MAX_HELD": "250"}
    reported["GATEWAY_HOLD_TIMEOUT"] += ".0"  # parsed as the gateway parses it, not compared as text
    snap.gateway_state.raw["settings"] = reported
    again = gateway_change.decide(stack, spec_250, new, snap)
    assert again == GatewayChange("", change.settings, ())


def test_a_new_image_or_a_gateway_that_cannot_say_needs_a_new_container(tmp_path: Path) -> None:
    stack, spec, new, snap, _ = _setup(tmp_path, reported=None, image_id="sha256:rebuilt")
    assert gateway_change.decide(stack, spec, new, snap).recreate == (
        "its image changed (gw:1 was rebuilt: a new image id)"
    )
    stack, spec, new, snap, _ = _setup(tmp_path, reported=None)
    snap.gateway.exec_run = lambda *a, **k: (0, (OLD_STATE, b""))  # an older image's /state
    spec_250 = spec.__class__(
        **{**spec.__dict__, "environment": (*spec.environment, ("GATEWAY_MAX_HELD", ("250",)))}
    )
    change = gateway_change.decide(stack, spec_250, new, snap)
    assert change.recreate.startswith("the running gateway cannot report its settings")


def test_the_plan_says_whether_the_gateway_changes_in_place_or_is_recreated() -> None:
    from composer.swap.ops import Hold, Member, Release, UpdateGateway
    from composer.swap.plan import Bring, with_gateway

    bring = Bring(Member("mtp", "mtp", "p-vllm-1", "vllm", "/state/mtp.yml"), gateway=True)
    live = GatewayChange("", (("GATEWAY_MAX_HELD", "250"),), ("GATEWAY_MAX_HELD", "GATEWAY_ALIASES"))
    plan = with_gateway(Plan(("mtp",), ("mtp",)), live, bring, True)
    assert not plan.no_op and plan.as_data()["gateway_in_place"] == ["GATEWAY_MAX_HELD", "GATEWAY_ALIASES"]
    assert plan.steps == () and [(type(op), op.how) for op in plan.ops] == [(UpdateGateway, "in place")]
    assert (
        "apply the gateway's changed settings in place (max_held, aliases): same container, nothing drained"
    ) in plan.describe()
    assert plan.describe().startswith("plan: {mtp} -> {mtp} (join)\n  1. UpdateGateway: ")
    assert "  keep mtp: serves throughout" in plan.describe()
    change = GatewayChange("its image changed")
    recreated = with_gateway(Plan(("mtp",), ("mtp",)), change, bring, True)
    assert [type(op) for op in recreated.ops] == [UpdateGateway, Hold, Release]
    assert recreated.ops[0].how == "replace"
    assert recreated.ops[-1] == Release("mtp", tell=True)  # the new gateway learns what serves
    assert (
        "the gateway is replaced by a new container (its image changed): start the new one with its new "
        "settings beside the old one, which then finishes its requests and stops"
    ) in recreated.describe()
    assert recreated.as_data()["operations"][0]["op"] == "UpdateGateway"
    assert Plan(("mtp",), ("mtp",)).no_op


def test_what_a_new_container_changes_is_named_and_the_key_never_shown(tmp_path: Path) -> None:
    """`--dry-run` says which setting needs the new container: the image, the published port or
    address, the API key (by name only), start-only settings."""
    stack, spec, _, snap, env = _setup(tmp_path, reported={})
    created = {**env, "VLLM_API_KEY": "an-old-key", "GATEWAY_LIVE_UPSTREAMS": "x"}
    snap.gateway.attrs["Config"]["Image"] = "gw:0"
    snap.gateway.holder.attrs["HostConfig"] = {
        "PortBindings": {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "9"}]}
    }
    snap.gateway.client.images.get = lambda name: SimpleNamespace(attrs={"Config": {"Env": ["PATH=/bin"]}})
    found = gateway_change.named(stack, spec, snap.gateway, created)
    port, image = resolve(spec.published_port), resolve(spec.image)
    assert found == [
        f"image gw:0 -> {image}",
        f"published port 9 -> {port}",
        "the API key",
        "start-only settings GATEWAY_LIVE_UPSTREAMS",
    ]
    assert "an-old-key" not in " ".join(found) and KEY not in " ".join(found)
    snap.gateway.attrs["Config"]["Image"] = image
    snap.gateway.holder.attrs["HostConfig"]["PortBindings"]["8000/tcp"][0]["HostPort"] = port
    assert gateway_change.named(stack, spec, snap.gateway, {**env, "VLLM_API_KEY": KEY}) == []


def test_a_moved_port_or_a_gateway_that_publishes_it_itself_needs_a_new_container(tmp_path: Path) -> None:
    """The port lives on the port holder: another port there, or an older gateway that publishes
    the port itself (no holder), needs a new container, whatever the gateway's own service says."""
    stack, spec, new, snap, _ = _setup(tmp_path, reported={})
    snap.gateway.holder.attrs["HostConfig"]["PortBindings"]["8000/tcp"][0]["HostPort"] = "9"
    assert gateway_change.decide(stack, spec, new, snap).recreate == (
        f"its port holder changed: published port 9 -> {resolve(spec.published_port)}"
    )
    stack, spec, new, snap, _ = _setup(tmp_path, reported={})
    snap.gateway.attrs["HostConfig"] = {"PortBindings": {"8000/tcp": [{"HostPort": str(stack.port)}]}}
    assert gateway_change.decide(stack, spec, new, snap).recreate.startswith(
        "it publishes the port itself (an older layout)"
    )
