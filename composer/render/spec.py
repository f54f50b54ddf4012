"""ServiceSpec: the one description of a container, derived from a stack variant.

Pure data. Host-specific values are `Var`s (an environment variable with a default), which
renderers emit as `${VAR:-default}`; everything else is literal.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace

from composer import labels as label_names
from composer.stack.adaptive import ADAPTIVE_KEY, SCHEDULE_KEY, V2_RUNNER_VAR
from composer.stack.keys import key_fingerprint
from composer.stack.model import Stack, Variant, image_env_var
from composer.stack.values import V2_RUNNER_METHODS

CONTAINER_PORT = 8000
API_KEY_VAR = "VLLM_API_KEY"
PIN_MEMORY_VAR = "VLLM_WSL2_ENABLE_PIN_MEMORY"
DEV_MODE_VAR = "VLLM_SERVER_DEV_MODE"  # opens /sleep, /wake_up, /is_sleeping (behind the gateway only)
SLEEP_MODE_FLAG = "--enable-sleep-mode"
HEALTH_PROBE = f'import urllib.request as u; u.urlopen("http://127.0.0.1:{CONTAINER_PORT}/health", timeout=5)'


@dataclass(frozen=True)
class Owner:
    """Who started a variant container, as its labels record it (the key's fingerprint, never the key)."""

    stack_file: str
    served_name: str
    key_fingerprint: str

    @classmethod
    def of(cls, stack: Stack) -> Owner | None:
        """This stack as an owner (None: loaded without its command line, so never recorded)."""
        if stack.owner_file is None:
            return None
        return cls(stack.owner_file, stack.served_model_name, key_fingerprint(stack.api_key))

    @classmethod
    def from_labels(cls, labels: dict[str, str]) -> Owner | None:
        """The owner a container records (None: an older container, or one started by hand)."""
        if not labels.get(label_names.STACK_FILE):
            return None
        return cls(
            labels[label_names.STACK_FILE],
            labels.get(label_names.SERVED_NAME, ""),
            labels.get(label_names.KEY_FINGERPRINT, ""),
        )

    def differences(self, other: Owner) -> list[str]:
        """How `other` serves differently from this owner, in words (the stack file aside)."""
        found = []
        if other.served_name != self.served_name:
            found.append(f"the served name {other.served_name!r}")
        if other.key_fingerprint != self.key_fingerprint:
            found.append("another API key")
        return found


def labelled(stack: Stack, spec: ServiceSpec, *extra: tuple[str, str]) -> ServiceSpec:
    """`spec` with its labels: config hash, port, served name, variant and `extra`, sorted; then
    who started it (the key's fingerprint and the stack file; none without a command line)."""
    own = {
        label_names.CONFIG_HASH: config_hash(spec),
        label_names.PORT: str(stack.port),
        label_names.SERVED_NAME: stack.served_model_name,
        label_names.VARIANT: spec.variant,
        **dict(extra),
    }
    labels = tuple(sorted(own.items()))
    if owner := Owner.of(stack):
        labels += (
            (label_names.KEY_FINGERPRINT, owner.key_fingerprint),
            (label_names.STACK_FILE, owner.stack_file),
        )
    return replace(spec, labels=labels)


@dataclass(frozen=True)
class Var:
    """A host value: environment variable `name`, falling back to `default`."""

    name: str
    default: str


Part = str | Var
Text = tuple[Part, ...]


def text(*parts: Part) -> Text:
    """A value made of literal strings and variables."""
    return tuple(p for p in parts if p != "")


def resolve(value: Text, overrides: dict[str, str] | None = None) -> str:
    """The string a Text becomes with each variable at its default (or override)."""
    overrides = overrides or {}
    return "".join(p if isinstance(p, str) else overrides.get(p.name) or p.default for p in value)


def variables(value: Text) -> list[Var]:
    return [p for p in value if isinstance(p, Var)]


@dataclass(frozen=True)
class Mount:
    """A read-only bind mount."""

    source: Text
    target: str
    read_only: bool = True

    @property
    def setting(self) -> str:
        """The variable that sets the source (`MODEL_DIR`), else "the stack"."""
        return next((var.name for var in variables(self.source)), "the stack")


@dataclass(frozen=True)
class Healthcheck:
    """A container healthcheck on vLLM's /health."""

    test: tuple[str, ...]
    interval: int
    timeout: int
    retries: int
    start_period: int


@dataclass(frozen=True)
class ServiceSpec:
    """Everything a container needs, shared by the compose and shell renderers."""

    project: str
    service: str
    variant: str
    image: Text
    command: tuple[Text, ...]
    environment: tuple[tuple[str, str], ...]
    mounts: tuple[Mount, ...]
    published_port: Text
    host_ip: Text
    publishes: bool  # False behind the gateway: the variant is reached on the project network
    gpus: Text | None
    healthcheck: Healthcheck
    stop_grace_period: int
    secret_env: tuple[str, ...] = (API_KEY_VAR,)
    container_port: int = CONTAINER_PORT
    ipc: str = "host"
    labels: tuple[tuple[str, str], ...] = ()
    restart: str = "unless-stopped"
    standby: str = "stop"
    logging: tuple[tuple[str, str], ...] = ()  # json-file options: max-size, max-file (rotation)

    @property
    def compose_service(self) -> str:
        """The compose service: the shared one, or `<service>-<variant>` under sleep standby."""
        return self.service if self.standby == "stop" else f"{self.service}-{self.variant}"

    @property
    def hash(self) -> str:
        """The config hash this spec's container is labelled with."""
        return dict(self.labels)[label_names.CONFIG_HASH]

    @property
    def container_name(self) -> str:
        """The name compose gives the first container of the service."""
        return f"{self.project}-{self.compose_service}-1"

    def variables(self) -> list[Var]:
        """Every host variable the spec uses, first occurrence order, no duplicates."""
        seen: dict[str, Var] = {}
        values: list[Text] = [self.image, *self.command]
        if self.publishes:
            values += [self.published_port, self.host_ip]
        values += [m.source for m in self.mounts]
        if self.gpus is not None:
            values.append(self.gpus)
        for value in values:
            for var in variables(value):
                seen.setdefault(var.name, var)
        return list(seen.values())


def speculative_config(stack: Stack, variant: Variant) -> Text | None:
    """`--speculative-config` as JSON, K as NUM_SPECULATIVE_TOKENS (a literal with a schedule)."""
    spec = variant.speculative
    if spec is None:
        return None
    k: Var | int = Var("NUM_SPECULATIVE_TOKENS", str(spec.num_speculative_tokens))
    if spec.per_batch_size is not None:  # the schedule's maximum K: no variable moves it
        k = spec.num_speculative_tokens
    config: dict[str, object] = {"method": spec.method}
    if spec.draft_model:
        config["model"] = stack.draft_path
    config["num_speculative_tokens"] = k
    if spec.attention_backend:
        config["attention_backend"] = spec.attention_backend
    config.update(dict(spec.extra))
    if spec.per_batch_size is not None:
        config[SCHEDULE_KEY] = [list(entry) for entry in spec.per_batch_size]
    if spec.adaptive_verification:
        config[ADAPTIVE_KEY] = True
    parts: list[Part] = []  # literal text joined, each variable a part of its own
    literal = "{"
    for index, (key, value) in enumerate(config.items()):
        literal += ("," if index else "") + json.dumps(key) + ":"
        if isinstance(value, Var):
            parts += [literal, value]
            literal = ""
        else:
            literal += json.dumps(value, separators=(",", ":"))
    return text(*parts, literal + "}")


LOG_DRIVER = "json-file"
# What the gateway's readiness poll and the container healthcheck ask every few seconds
# (/health), the status page's scrapes (/metrics) and the sleep checks (/is_sleeping): kept
# out of vLLM's access log unless stack.log_probes (vLLM has the flag since 0.13).
PROBE_ENDPOINTS = ("/health", "/metrics", "/is_sleeping")
QUIET_PROBES_FLAG = "--disable-access-log-for-endpoints"


def docker_size(size: int) -> str:
    """Bytes as Docker's log-opt size: `50m` when whole MiB, `512k` when whole KiB, else bytes."""
    for unit, factor in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def log_options(stack: Stack) -> tuple[tuple[str, str], ...]:
    """The json-file driver's rotation options for every rendered container."""
    return (("max-size", docker_size(stack.log_max_size)), ("max-file", str(stack.log_max_files)))


def _command(stack: Stack, variant: Variant) -> tuple[Text, ...]:
    args: list[Text] = [
        text(stack.model_path),
        text("--served-model-name"),
        text(stack.served_model_name),
        text("--port"),
        text(str(CONTAINER_PORT)),
        text("--tensor-parallel-size"),
        text(str(stack.tensor_parallel_size)),
        text("--max-model-len"),
        text(str(stack.max_model_len)),
    ]
    if variant.kv_cache_memory is not None:
        args += [
            text("--kv-cache-memory-bytes"),
            text(Var("KV_CACHE_MEMORY", str(variant.kv_cache_memory))),
        ]
    args += [text("--attention-backend"), text(stack.attention_backend)]
    speculative = speculative_config(stack, variant)
    if speculative is not None:
        args += [text("--speculative-config"), speculative]
    if variant.standby == "sleep":
        args.append(text(SLEEP_MODE_FLAG))
    if not stack.log_probes and not any(a.split("=")[0] == QUIET_PROBES_FLAG for a in variant.extra_args):
        args += [text(QUIET_PROBES_FLAG), text(",".join(PROBE_ENDPOINTS))]
    args += [text(a) for a in variant.extra_args]
    return tuple(args)


def _environment(stack: Stack, variant: Variant) -> tuple[tuple[str, str], ...]:
    env = dict(stack.env)
    spec = variant.speculative
    if spec is not None and (spec.method in V2_RUNNER_METHODS or spec.adaptive_verification):
        # Always on for V2-runner methods: harmless off WSL2, required on it.
        env[PIN_MEMORY_VAR] = "1"
    if spec is not None and spec.adaptive_verification:
        env[V2_RUNNER_VAR] = "1"  # adaptive verification exists only in the V2 model runner
    if variant.standby == "sleep":
        env[DEV_MODE_VAR] = "1"
    env.update(dict(variant.env))
    return tuple(sorted(env.items()))


def build_spec(stack: Stack, variant: Variant) -> ServiceSpec:
    """Derive the container spec of one variant."""
    mounts = [Mount(text(Var("MODEL_DIR", stack.model_dir)), stack.model_path)]
    if variant.speculative is not None and variant.speculative.draft_model:
        mounts.append(Mount(text(Var("DRAFT_DIR", stack.draft_dir)), stack.draft_path))
    gpus = None if stack.gpus is None else text(Var("GPU_DEVICES", ",".join(stack.gpus)))
    spec = ServiceSpec(
        project=stack.project,
        service=stack.service,
        variant=variant.name,
        image=text(Var(image_env_var(variant.image_key), stack.image(variant.image_key))),
        command=_command(stack, variant),
        environment=_environment(stack, variant),
        mounts=tuple(mounts),
        published_port=text(Var("VLLM_PORT", str(stack.port))),
        host_ip=text(Var("VLLM_BIND_ADDRESS", stack.bind_address)),
        publishes=not stack.gateway.enabled,
        gpus=gpus,
        healthcheck=Healthcheck(
            test=("CMD", "python3", "-c", HEALTH_PROBE),
            interval=10,
            timeout=5,
            retries=3,
            start_period=stack.start_period,
        ),
        stop_grace_period=stack.stop_grace_period,
        restart=stack.restart,
        standby=variant.standby,
        logging=log_options(stack),
    )
    return labelled(stack, spec)


def config_hash(spec: ServiceSpec) -> str:
    """A short digest of what the container would run (labels excluded, no secrets)."""
    data = asdict(replace(spec, labels=()))
    del data["standby"]  # already in the command (--enable-sleep-mode): stop-standby hashes stay as they were
    encoded = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(encoded).hexdigest()[:16]
