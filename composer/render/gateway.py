"""GatewaySpec: the gateway's container, derived from the stack (pure data, no I/O).

It is the same in every variant's compose file, so starting any of them by hand leaves a
running gateway untouched and recreates only the variant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from composer import labels as label_names
from composer.render.spec import API_KEY_VAR, CONTAINER_PORT, Healthcheck, Text, Var, log_options, text
from composer.stack.model import Stack
from composer.stack.workload_classes import gateway_workloads

SERVICE = "gateway"
# The switch history survives a restart (or a recreation) of the gateway in this named volume.
STATE_VOLUME = "gateway-state"
STATE_DIR = "/var/lib/gateway"
# The gateway's CPU weight (the kernel's maximum): every chunk of every stream passes through it,
# and at the default weight it waits behind vLLM's busy threads and a stream arrives all at once.
CPU_SHARES = 262144
HEALTH_PROBE = (
    f'import urllib.request as u; u.urlopen("http://127.0.0.1:{CONTAINER_PORT}/gateway/health", timeout=5)'
)

TUNABLES = (
    "hold_timeout max_held drain_timeout max_head_bytes head_timeout body_timeout keep_alive_timeout "
    "max_connections stall_timeout unresponsive_timeout hold_keepalive"
)
"""The `[gateway]` settings a host may override by variable, in the order rendered."""
HEALTHCHECK = Healthcheck(
    ("CMD", "python3", "-c", HEALTH_PROBE), interval=10, timeout=5, retries=3, start_period=5
)
PORT_HOLDER = "import signal, sys; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); signal.pause()"


@dataclass(frozen=True)
class GatewaySpec:
    """Everything the gateway's container needs, for the compose renderer."""

    project: str
    image: Text
    environment: tuple[tuple[str, Text], ...]
    published_port: Text
    host_ip: Text
    labels: tuple[tuple[str, str], ...]
    service: str = SERVICE
    secret_env: tuple[str, ...] = (API_KEY_VAR,)
    container_port: int = CONTAINER_PORT
    healthcheck: Healthcheck = HEALTHCHECK
    stop_grace_period: int = 10
    cpu_shares: int = CPU_SHARES
    logging: tuple[tuple[str, str], ...] = ()  # json-file options: max-size, max-file (rotation)
    state_volume: str = STATE_VOLUME
    state_dir: str = STATE_DIR
    port_holder_command: ClassVar[tuple[str, ...]] = ("python3", "-c", PORT_HOLDER)  # waits, ends on SIGTERM

    @property
    def container_name(self) -> str:
        return f"{self.project}-{self.service}-1"

    @property
    def port_service(self) -> str:
        """The port holder's service: it publishes the port; the gateway joins its network."""
        return f"{self.service}-port"

    @property
    def port_labels(self) -> tuple[tuple[str, str], ...]:
        """The port holder's labels: the gateway's, with its own role."""
        role = (label_names.ROLE, label_names.ROLE_GATEWAY_PORT)
        return (*(item for item in self.labels if item[0] != label_names.ROLE), role)


def build_gateway_spec(stack: Stack) -> GatewaySpec | None:
    """The gateway's container, or None when the stack runs without one."""
    settings = stack.gateway
    if not settings.enabled:
        return None
    environment = (
        ("GATEWAY_UPSTREAM", text(f"http://{stack.service}:{CONTAINER_PORT}")),
        ("GATEWAY_PORT", text(str(CONTAINER_PORT))),
        ("GATEWAY_SERVED_NAME", text(stack.served_model_name)),
        *_tunables(stack, TUNABLES),
        ("GATEWAY_STATE_DIR", text(STATE_DIR)),
    )
    sleepers = [name for name, variant in stack.variants.items() if variant.standby == "sleep"]
    if sleepers:  # the sleep-standby containers, each by its own name (see composer.render.spec)
        urls = ",".join(
            f"http://{stack.project}-{stack.service}-{name}-1:{CONTAINER_PORT}" for name in sleepers
        )
        environment += (("GATEWAY_UPSTREAM_CANDIDATES", text(urls)),)
    environment += _routing_environment(stack)
    if not settings.continue_streams:  # absent: on (composer.gateway.public.continuation)
        environment += (("GATEWAY_CONTINUE_STREAMS", text("false")),)
    if settings.spill:  # live routing's overflow (composer.gateway.routing.routing); absent: off
        environment += _tunables(stack, "spill")
    return GatewaySpec(
        project=stack.project,
        image=text(Var("GATEWAY_IMAGE", settings.image)),
        environment=environment,
        published_port=text(Var("VLLM_PORT", str(stack.port))),
        host_ip=text(Var("VLLM_BIND_ADDRESS", stack.bind_address)),
        labels=((label_names.PORT, str(stack.port)), (label_names.ROLE, label_names.ROLE_GATEWAY)),
        logging=log_options(stack),
    )


def _tunables(stack: Stack, keys: str) -> tuple[tuple[str, Text], ...]:
    """`[gateway]` settings (`keys`, space-separated) as `${GATEWAY_<KEY>:-value}` host values."""
    return tuple(
        (f"GATEWAY_{key.upper()}", text(Var(f"GATEWAY_{key.upper()}", str(getattr(stack.gateway, key)))))
        for key in keys.split()
    )


def _routing_environment(stack: Stack) -> tuple[tuple[str, Text], ...]:
    """Aliases and workload classes when the stack has some; switching settings when it switches."""
    settings = stack.gateway
    environment: tuple[tuple[str, Text], ...] = ()
    aliases = ",".join(f"{alias}={name}" for name, var in stack.variants.items() for alias in var.aliases)
    if aliases:
        environment += (("GATEWAY_ALIASES", text(aliases)),)
    if classes := gateway_workloads(stack.workloads):
        environment += (("GATEWAY_WORKLOADS", text(classes)),)
    if settings.switches:
        environment += (
            ("GATEWAY_SWITCH_ON_MODEL", text("true" if settings.switch_on_model else "false")),
            ("GATEWAY_POLICY", text(settings.policy)),
            *_tunables(stack, "min_residency residency_wait policy_window"),
        )
    return environment
