"""How the running gateway differs from the stack: a new container, or settings applied in place.

Settings a running gateway takes in place (`composer.gateway.config.LIVE`) are compared,
parsed by the gateway's own parser, with those it reports in effect (`/state`'s `settings`),
never its container's environment (changed in place, it keeps the old one). Everything else
(image, published port and address, mounts, the API key, start-only settings) needs a new
container: compose's config hash decides, over the run file's gateway service with the live
settings the container was created with. The reason names what differs (`named`), so
`up --dry-run` says why the gateway is replaced.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from composer.engine.client import compose
from composer.errors import ComposerError, GatewayConfigError
from composer.gateway.config import LIVE, load_config
from composer.render.runfiles import compose_environment
from composer.render.spec import API_KEY_VAR, resolve
from composer.swap.plan import GatewayChange

if TYPE_CHECKING:
    from docker.models.containers import Container

    from composer.gateway.host.client import GatewayControl
    from composer.render.gateway import GatewaySpec
    from composer.stack.model import Stack
    from composer.swap.snapshot import Snapshot


def container_env(container: Container) -> dict[str, str]:
    """The environment the container was created with."""
    items = (container.attrs.get("Config") or {}).get("Env") or []
    return dict(item.split("=", 1) for item in items if "=" in item)


def differing(wanted: dict[str, str], running: dict[str, str], served: str) -> tuple[str, ...]:
    """The live settings whose values (parsed as the gateway parses them) differ; none when
    every value is written the same (no parse: the common `up`)."""
    if all(wanted.get(name, "").strip() == running.get(name, "").strip() for name in LIVE):
        return ()
    try:
        values = [
            load_config({**env, "GATEWAY_SERVED_NAME": served}).live_values() for env in (wanted, running)
        ]
    except GatewayConfigError:  # one cannot be parsed: compare what was written
        return tuple(name for name in LIVE if wanted.get(name, "") != running.get(name, ""))
    return tuple(name for name in LIVE if values[0][name] != values[1][name])


def in_effect(snap: Snapshot, control: GatewayControl | None = None) -> dict[str, str] | None:
    """The live settings the running gateway reports (None: it cannot say, an older image);
    `control`: a session already open to it (else one `docker exec`)."""
    from composer.gateway.host.client import GatewayControl

    state = snap.gateway_state
    if state is None and snap.gateway is not None:
        with contextlib.suppress(ComposerError):
            state = (control or GatewayControl(snap.gateway)).state()
    settings = state.raw.get("settings") if state is not None else None
    if not isinstance(settings, dict):
        return None
    return {name: str(settings.get(name, "")) for name in LIVE}


def decide(
    stack: Stack,
    gateway: GatewaySpec,
    compose_file: Path,
    snap: Snapshot,
    control: GatewayControl | None = None,
) -> GatewayChange:
    """How the running gateway differs from `gateway` (the stack's, rendered in `compose_file`);
    `control`: a control session already open to it (see `in_effect`)."""
    container = snap.gateway
    if container is None or not snap.gateway_running:
        return GatewayChange()
    wanted = _wanted(gateway)
    created = container_env(container)
    recreate = _container_differs(stack, compose_file, container, created, gateway)
    reported = in_effect(snap, control) if not recreate else None
    running = reported if reported is not None else {name: created.get(name, "") for name in LIVE}
    changed = differing(wanted, running, stack.served_model_name)
    if changed and reported is None and not recreate:
        recreate = "the running gateway cannot report its settings (an older image)"
    return GatewayChange(recreate, tuple(wanted.items()), changed)


def _wanted(gateway: GatewaySpec) -> dict[str, str]:
    """The live settings as `gateway` sets them ("": not set, the default)."""
    rendered = {name: resolve(value) for name, value in gateway.environment}
    return {name: rendered.get(name, "") for name in LIVE}


def in_place(stack: Stack, gateway: GatewaySpec, snap: Snapshot) -> GatewayChange:
    """The live settings the running gateway of a live set takes in place (aliases, spill,
    stall_timeout, ...): those it reports that differ from `gateway`'s. Its container is
    recreated only by `up --recreate-gateway` (the set's members are in its environment)."""
    if snap.gateway is None or not snap.gateway_running:
        return GatewayChange()
    reported = in_effect(snap)
    if reported is None:  # an older image cannot say: nothing is applied
        return GatewayChange()
    wanted = _wanted(gateway)
    return GatewayChange("", tuple(wanted.items()), differing(wanted, reported, stack.served_model_name))


def _container_differs(
    stack: Stack, compose_file: Path, container: Container, created: dict[str, str], gateway: GatewaySpec
) -> str:
    """Why the container-level part differs ("" when it does not, or when compose cannot say)."""
    from composer.engine.containers import network_owner

    if network_owner(container) is container:
        return "it publishes the port itself (an older layout): a port holder takes the port over"
    if moved := _port_changes(gateway, container):
        return "its port holder changed: " + "; ".join(moved)
    image = (container.attrs.get("Config") or {}).get("Image", "")
    with contextlib.suppress(Exception):  # the image is gone or Docker does not answer: compose decides
        if image and container.client.images.get(image).id != container.attrs.get("Image"):
            return f"its image changed ({image} was rebuilt: a new image id)"
    labels = container.labels or {}
    same_key = created.get(API_KEY_VAR, "") == (stack.api_key or "")
    if same_key and _same_service(compose_file, labels.get("com.docker.compose.project.config_files")):
        return ""
    network = str((container.attrs.get("HostConfig") or {}).get("NetworkMode") or "")
    wanted = _container_hash(stack, compose_file, {n: created[n] for n in LIVE if n in created}, network)
    if wanted and labels.get("com.docker.compose.config-hash") not in (None, wanted):
        found = named(stack, gateway, container, created)
        if found:
            return "its container changed: " + "; ".join(found)
        return (
            "its container changed (image, published port or address, mounts, API key or start-only settings)"
        )
    return ""


def named(stack: Stack, gateway: GatewaySpec, container: Container, created: dict[str, str]) -> list[str]:
    """What differs between the container's record and `gateway`, by name (the API key never
    shown): `image a -> b`, `published port 8000 -> 8001`, `start-only settings GATEWAY_X`, ..."""
    config = container.attrs.get("Config") or {}
    found = []
    image = resolve(gateway.image)
    if config.get("Image") and config["Image"] != image:
        found.append(f"image {config['Image']} -> {image}")
    found += _port_changes(gateway, container)
    if created.get(API_KEY_VAR, "") != (stack.api_key or ""):
        found.append("the API key")
    wanted = {name: resolve(value) for name, value in gateway.environment if name not in LIVE}
    removed = {n for n in created if n.startswith("GATEWAY_") and n not in LIVE} - _image_env(container)
    start_only = sorted(n for n in set(wanted) | removed if wanted.get(n) != created.get(n))
    if start_only:
        found.append("start-only settings " + ", ".join(start_only))
    return found


def _port_changes(gateway: GatewaySpec, container: Container) -> list[str]:
    """How the port the gateway's network publishes differs from `gateway`'s, in words."""
    from composer.engine.containers import port_bindings

    binding = (port_bindings(container).get(f"{gateway.container_port}/tcp") or [{}])[0] or {}
    return [
        f"{what} {had} -> {resolve(text)}"
        for what, had, text in (
            ("published port", binding.get("HostPort"), gateway.published_port),
            ("bind address", binding.get("HostIp"), gateway.host_ip),
        )
        if had is not None and str(had) != resolve(text)
    ]


def _image_env(container: Container) -> set[str]:
    """The names the container's image sets in its environment (none when Docker cannot say)."""
    with contextlib.suppress(Exception):
        image = container.client.images.get(container.attrs.get("Image"))
        return {item.split("=", 1)[0] for item in (image.attrs.get("Config") or {}).get("Env") or []}
    return set()


def _load(path: Path | str) -> dict:
    import yaml

    from composer.stack.bounded import RUN_FILE_LIMIT, read_bounded

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster, on up's path
    return yaml.load(read_bounded(path, "run file", RUN_FILE_LIMIT), Loader=loader)


def _container_part(service: dict) -> dict:
    env = {k: v for k, v in (service.get("environment") or {}).items() if k not in LIVE}
    return {**service, "environment": env}


def _same_service(compose_file: Path, created_from: str | None) -> bool:
    """The gateway's service in the run file equals, but for its live settings, the one in
    the file that created it (run files resolve every value but the API key)."""
    import yaml

    from composer.stack.bounded import FileTooLarge

    if not created_from:
        return False
    created = Path(created_from.split(",")[0])
    if created.resolve() == Path(compose_file).resolve():
        return False  # rewritten for this up (same variant hash): compose's hash decides
    try:
        old, new = (_container_part(_load(f)["services"]["gateway"]) for f in (created, compose_file))
    except (OSError, KeyError, TypeError, AttributeError, yaml.YAMLError, FileTooLarge):
        return False
    return bool(old == new)


def _container_hash(stack: Stack, compose_file: Path, created: dict[str, str], network: str = "") -> str:
    """Compose's config hash of the run file's gateway service with the live settings the
    container was created with ("" when compose cannot say); `network`: the container's
    network mode (`container:<id>`), which compose hashes in place of `service:gateway-port`."""
    import yaml

    try:
        document = _load(compose_file)
        service = document["services"]["gateway"]
    except (OSError, KeyError, TypeError, yaml.YAMLError, ComposerError):
        return ""
    env = _container_part(service)["environment"]
    service["environment"] = {**env, **{k: v.replace("$", "$$") for k, v in created.items()}}
    if network.startswith("container:") and str(service.get("network_mode", "")).startswith("service:"):
        service["network_mode"] = network
    fd, tmp = tempfile.mkstemp(dir=compose_file.parent, prefix=".gateway-", suffix=".yml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            yaml.safe_dump(document, out, sort_keys=False)
        env_vars = compose_environment(compose_file, stack.api_key)
        done = compose(stack.project, Path(tmp), ["config", "--hash", "gateway"], env=env_vars, timeout=60)
    except (OSError, ComposerError):
        return ""
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    words = done.stdout.split()
    return words[-1] if words else ""
