"""GatewaySpec: the gateway's container, derived from the stack (pure data, no I/O).

It is the same in every variant's compose file, so starting any of them by hand leaves a
running gateway untouched and recreates only the variant.
"""

from __future__ import annotations

from dataclasses import dataclass

from composer import labels as label_names
from composer.render.spec import API_KEY_VAR, CONTAINER_PORT, Healthcheck, Text, Var, log_options, text
from composer.stack.model import Stack
from composer.stack.workload_classes import gateway_workloads

SERVICE = "gateway"
# The switch history survives a restart (or a recreation) of the gateway in this named volume.
STATE_VOLUME = "gateway-state"
STATE_DIR = "/var/lib/gateway"
# The gateway's CPU weight (Docker's cpu_shares; the kernel's maximum, 1024 is the default).
# It needs little CPU but needs it at once: every chunk of every stream passes through it.
# At the default weight, on a host whose CPUs vLLM's busy engine threads saturate, the
# gateway waits runnable for the whole generation and a stream arrives all at once.
CPU_SHARES = 262144
HEALTH_PROBE = (
    f'import urllib.request as u; u.urlopen("http://127.0.0.1:{CONTAINER_PORT}/gateway/health", timeout=5)'
)

PORT_HOLDER = "import signal, sys; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); signal.pause()"


@dataclass(frozen=True)
class GatewaySpec:
    """Everything the gateway's container needs, for the compose renderer."""

    project: str
    service: str
    image: Text
    environment: tuple[tuple[str, Text], ...]
    secret_env: tuple[str, ...]
    published_port: Text
    host_ip: Text
    container_port: int
    labels: tuple[tuple[str, str], ...]
    healthcheck: Healthcheck
    stop_grace_period: int
    cpu_shares: int = CPU_SHARES
    logging: tuple[tuple[str, str], ...] = ()  # json-file options: max-size, max-file (rotation)
    state_volume: str = STATE_VOLUME
    state_dir: str = STATE_DIR

    @property
    def container_name(self) -> str:
        """The name compose gives the gateway's container."""
        return f"{self.project}-{self.service}-1"

    @property
    def port_service(self) -> str:
        """The port holder's service: it publishes the port; the gateway joins its network."""
        return f"{self.service}-port"

    @property
    def port_holder_command(self) -> tuple[str, ...]:
        """The port holder's process: it waits, and ends on SIGTERM."""
        return ("python3", "-c", PORT_HOLDER)

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
        ("GATEWAY_HOLD_TIMEOUT", text(Var("GATEWAY_HOLD_TIMEOUT", str(settings.hold_timeout)))),
        ("GATEWAY_MAX_HELD", text(Var("GATEWAY_MAX_HELD", str(settings.max_held)))),
        ("GATEWAY_DRAIN_TIMEOUT", text(Var("GATEWAY_DRAIN_TIMEOUT", str(settings.drain_timeout)))),
        ("GATEWAY_MAX_HEAD_BYTES", text(Var("GATEWAY_MAX_HEAD_BYTES", str(settings.max_head_bytes)))),
        ("GATEWAY_HEAD_TIMEOUT", text(Var("GATEWAY_HEAD_TIMEOUT", str(settings.head_timeout)))),
        ("GATEWAY_BODY_TIMEOUT", text(Var("GATEWAY_BODY_TIMEOUT", str(settings.body_timeout)))),
        (
            "GATEWAY_KEEP_ALIVE_TIMEOUT",
            text(Var("GATEWAY_KEEP_ALIVE_TIMEOUT", str(settings.keep_alive_timeout))),
        ),
        ("GATEWAY_MAX_CONNECTIONS", text(Var("GATEWAY_MAX_CONNECTIONS", str(settings.max_connections)))),
        ("GATEWAY_STALL_TIMEOUT", text(Var("GATEWAY_STALL_TIMEOUT", str(settings.stall_timeout)))),
        (
            "GATEWAY_UNRESPONSIVE_TIMEOUT",
            text(Var("GATEWAY_UNRESPONSIVE_TIMEOUT", str(settings.unresponsive_timeout))),
        ),
        ("GATEWAY_HOLD_KEEPALIVE", text(Var("GATEWAY_HOLD_KEEPALIVE", str(settings.hold_keepalive)))),
        ("GATEWAY_STATE_DIR", text(STATE_DIR)),
    )
    sleepers = [name for name, variant in stack.variants.items() if variant.standby == "sleep"]
    if sleepers:  # the sleep-standby containers, each by its own name (see composer.render.spec)
        urls = ",".join(
            f"http://{stack.project}-{stack.service}-{name}-1:{CONTAINER_PORT}" for name in sleepers
        )
        environment += (("GATEWAY_UPSTREAM_CANDIDATES", text(urls)),)
    environment += _routing_environment(stack)
    if not settings.continue_streams:  # absent: on (composer.gateway.continuation)
        environment += (("GATEWAY_CONTINUE_STREAMS", text("false")),)
    if settings.spill:  # live routing's overflow (composer.gateway.routing); absent: off
        environment += (("GATEWAY_SPILL", text(Var("GATEWAY_SPILL", str(settings.spill)))),)
    return GatewaySpec(
        project=stack.project,
        service=SERVICE,
        image=text(Var("GATEWAY_IMAGE", settings.image)),
        environment=environment,
        secret_env=(API_KEY_VAR,),
        published_port=text(Var("VLLM_PORT", str(stack.port))),
        host_ip=text(Var("VLLM_BIND_ADDRESS", stack.bind_address)),
        container_port=CONTAINER_PORT,
        labels=((label_names.PORT, str(stack.port)), (label_names.ROLE, label_names.ROLE_GATEWAY)),
        healthcheck=Healthcheck(
            test=("CMD", "python3", "-c", HEALTH_PROBE), interval=10, timeout=5, retries=3, start_period=5
        ),
        stop_grace_period=10,
        logging=log_options(stack),
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
            ("GATEWAY_MIN_RESIDENCY", text(Var("GATEWAY_MIN_RESIDENCY", str(settings.min_residency)))),
            ("GATEWAY_RESIDENCY_WAIT", text(Var("GATEWAY_RESIDENCY_WAIT", str(settings.residency_wait)))),
            ("GATEWAY_POLICY_WINDOW", text(Var("GATEWAY_POLICY_WINDOW", str(settings.policy_window)))),
        )
    return environment
