"""Docker checks: engine reachable, Compose v2 plugin, GPU support in the engine, images,
and how the engine publishes ports (its userland proxy)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from composer.doctor.gpu_checks import DEMO_ONLY
from composer.doctor.preflight import Finding, check_image
from composer.engine import fixes
from composer.errors import DockerUnavailable
from composer.stack.model import Stack

if TYPE_CHECKING:
    import docker

    from composer.engine.client import Endpoint

MIN_ENGINE = (19, 3)  # first engine with --gpus and compose device reservations
MIN_KERNEL = (5, 14)  # first kernel with net.ipv4.tcp_migrate_req (the gateway's port holder sets it)
NVIDIA_HOOK = "nvidia-container-runtime-hook"


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version)[:2])


def engine_finding(version: str, kernel: str = "", gateway: bool = True) -> Finding:
    """Classify a reachable engine by its version and, for a stack with a gateway, its kernel's."""
    where = os.environ.get("DOCKER_HOST", "the default socket")
    if gateway and kernel and _version_tuple(kernel) < MIN_KERNEL:
        return Finding(
            "docker-engine",
            "fail",
            f"the engine at {where} runs kernel {kernel}, older than 5.14: the gateway's port holder sets "
            "net.ipv4.tcp_migrate_req (it hands the port from an old gateway to a new one), which it lacks, "
            "so the stack's containers would not start",
            "run the engine on a kernel 5.14 or newer, or set gateway.enabled = false (the variant then "
            "publishes the port itself)",
        )
    if _version_tuple(version) < MIN_ENGINE:
        return Finding(
            "docker-engine",
            "warn",
            f"Docker Engine {version} at {where} predates GPU support (--gpus, 19.03)",
            fixes.install_docker("a newer Docker Engine"),
        )
    return Finding("docker-engine", "ok", f"Docker Engine {version} at {where}")


def check_engine(
    client_factory: Callable[[], docker.DockerClient], gateway: bool = True
) -> tuple[Finding, docker.DockerClient | None]:
    """Connect once; the client (or None) is reused by the other Docker checks (`gateway`:
    the stack runs one, whose port holder needs a kernel 5.14 or newer)."""
    from docker.errors import DockerException

    try:
        client = client_factory()
        facts = client.version()
        version, kernel = str(facts.get("Version", "?")), str(facts.get("KernelVersion") or "")
    except (DockerUnavailable, DockerException) as err:
        return Finding("docker-engine", "fail", str(err), fixes.start_docker()), None
    return engine_finding(version, kernel, gateway), client


def check_compose(compose_version: Callable[[], str]) -> Finding:
    """The Compose v2 plugin answers `docker compose version`."""
    install = fixes.install_docker("the Compose v2 plugin")
    try:
        version = compose_version()
    except DockerUnavailable as err:
        return Finding("compose-plugin", "fail", str(err), install)
    if _version_tuple(version) < (2, 0):
        return Finding("compose-plugin", "warn", f"Compose {version} is older than v2", install)
    return Finding("compose-plugin", "ok", f"Compose {version}")


def nvidia_runtime_finding(runtimes: Iterable[str], gpus_wanted: bool, hook_present: bool) -> Finding:
    """Classify the engine's GPU support from its runtimes and the NVIDIA hook."""
    names = sorted(runtimes)
    if not gpus_wanted:
        return Finding("nvidia-runtime", "ok", DEMO_ONLY)
    if "nvidia" in names:
        return Finding("nvidia-runtime", "ok", "the engine has the nvidia runtime")
    configure = "nvidia-ctk runtime configure --runtime=docker, then restart dockerd"
    if hook_present:
        return Finding(
            "nvidia-runtime",
            "warn",
            f"no nvidia runtime registered (runtimes: {', '.join(names)}); --gpus relies on {NVIDIA_HOOK}",
            configure,
        )
    return Finding(
        "nvidia-runtime",
        "fail",
        f"the engine cannot give GPUs to containers: runtimes {', '.join(names) or 'none'}, no {NVIDIA_HOOK}",
        f"install the NVIDIA Container Toolkit and run {configure}; or set GPU_DEVICES=none for a demo",
    )


def check_nvidia_runtime(stack: Stack, client: docker.DockerClient) -> Finding:
    """GPUs reach containers through the NVIDIA runtime (or the stack wants none)."""
    runtimes = (client.info().get("Runtimes") or {}).keys()
    return nvidia_runtime_finding(runtimes, stack.gpus is not None, shutil.which(NVIDIA_HOOK) is not None)


def check_gateway_image(stack: Stack, client: docker.DockerClient) -> Finding | None:
    """The gateway's image is present locally; None when the stack runs without a gateway."""
    if not stack.gateway.enabled:
        return None
    found = check_image(client, stack.gateway.image)
    fix = f"build or load it first ({fixes.build_image(stack.gateway.image)})" if found.fix else ""
    return replace(found, name="gateway-image", fix=fix)


PROXY_PROCESS = "docker-proxy"
DAEMON_JSON = Path("/etc/docker/daemon.json")
USERLAND_PROXY = "userland-proxy"


def live_restore_finding(info: dict, gateway: bool) -> Finding | None:
    """Warn when a daemon restart stops the stack (no live-restore): Docker then starts the
    project's containers in no order, and a gateway started before its port holder stays down
    (Docker does not retry it); None without a gateway."""
    if not gateway:
        return None
    if info.get("LiveRestoreEnabled"):
        return Finding(
            "live-restore", "ok", "containers keep running while the engine restarts (live-restore)"
        )
    return Finding(
        "live-restore",
        "warn",
        "a restart of the engine (an upgrade) stops every container, and Docker may start the gateway "
        "before its port holder: it then stays down and the port refuses clients until "
        "`compose-spec up VARIANT`",
        f'add "live-restore": true to {DAEMON_JSON} and reload dockerd (sudo systemctl reload docker: '
        "running containers are kept); after a reboot, run `compose-spec up VARIANT` "
        "(`compose-spec status` exits 1 while the gateway is down)",
    )


@dataclass(frozen=True)
class ProxyFacts:
    """How the local engine publishes ports, as its processes and its config file say."""

    dockerd_seen: bool = False
    flag: bool | None = None  # dockerd's --userland-proxy (None: not on its command line)
    config: dict[str, object] | None = None  # daemon.json (None: absent or unreadable)
    proxied_ports: frozenset[int] = frozenset()  # host ports a docker-proxy process serves


def _flag_value(argv: list[str]) -> bool | None:
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name.lstrip("-") != USERLAND_PROXY:
            continue
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else "true"
        return value.strip().lower() not in ("false", "0")
    return None


def read_proxy_facts(proc: Path = Path("/proc"), daemon_json: Path = DAEMON_JSON) -> ProxyFacts:
    """Read the local engine's processes (dockerd, docker-proxy) and its daemon.json."""
    seen, flag, ports = False, None, set()
    for cmdline in proc.glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        program = os.path.basename(argv[0])
        if program == "dockerd":
            seen, flag = True, _flag_value(argv[1:])
        elif program == PROXY_PROCESS and "-host-port" in argv[:-1]:
            with contextlib.suppress(ValueError):
                ports.add(int(argv[argv.index("-host-port") + 1]))
    try:
        config = json.loads(daemon_json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    return ProxyFacts(seen, flag, config if isinstance(config, dict) else None, frozenset(ports))


def userland_proxy_finding(port: int, facts: ProxyFacts, daemon_json: Path = DAEMON_JSON) -> Finding | None:
    """Warn when the engine publishes ports through its userland proxy; None when no local
    engine is seen (Docker Desktop, another machine)."""
    configured = facts.config.get(USERLAND_PROXY) if facts.config else None
    off = facts.flag is False or (facts.flag is None and configured is False)
    in_use = port in facts.proxied_ports
    if not in_use and off:
        return Finding(
            "userland-proxy", "ok", "the engine's userland proxy is off: ports go through iptables"
        )
    if not in_use and not (facts.dockerd_seen or facts.proxied_ports):
        return None
    where = (
        f"port {port} is published through {PROXY_PROCESS}"
        if in_use
        else "the engine publishes ports through its userland proxy (the default)"
    )
    detail = (
        f"{where}: that proxy keeps two descriptors for every client connection and dies under about "
        "6,000 connections held open, which the gateway's max_connections cannot prevent"
    )
    if facts.flag:
        fix = "start dockerd with --userland-proxy=false instead of --userland-proxy=true"
    else:
        merged = json.dumps({**(facts.config or {}), USERLAND_PROXY: False})
        fix = f"write {merged} to {daemon_json}"
    return Finding(
        "userland-proxy",
        "warn",
        detail,
        f"{fix}, restart dockerd (sudo systemctl restart docker: it stops running containers), "
        "then `compose-spec up --recreate-gateway`; published ports then go through iptables, "
        "with no proxy process",
    )


def check_userland_proxy(stack: Stack, endpoint: Endpoint | None) -> Finding | None:
    """The local engine publishes the stack's port without its userland proxy."""
    if endpoint is None or endpoint.remote:
        return None
    return userland_proxy_finding(stack.port, read_proxy_facts())
