"""Every settable key of a stack, with its kind and a one-line description (`KEYS`).

The one table `config` lists, `config --keys` prints, `--set` suggests from and the JSON
Schema is generated from. The loader's tables (`STACK_SETTINGS` here, `GATEWAY_SETTINGS`,
`KUBE_SETTINGS`) say how a value is parsed; a test keeps `KEYS` equal to them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from composer.stack import values as v
from composer.stack.gateway import POLICIES
from composer.stack.kubernetes import MODEL_SOURCES, PDB_CHOICES, PULL_POLICIES


@dataclass(frozen=True)
class Setting:
    """One stack-level setting: its key, environment variable, parser and default."""

    key: str
    env: str | None
    parse: Callable[[object], object]
    default: object
    is_path: bool = False


STACK_SETTINGS: tuple[Setting, ...] = (
    Setting("project", "COMPOSE_PROJECT_NAME", v.parse_name, None),  # None: the stack's folder name
    Setting("service", None, v.parse_name, "vllm"),
    Setting("served_model_name", "SERVED_MODEL_NAME", v.parse_served_name, "model"),
    Setting("port", "VLLM_PORT", v.parse_port, 8000),
    Setting("bind_address", "VLLM_BIND_ADDRESS", v.parse_ip, "127.0.0.1"),
    Setting("tensor_parallel_size", "TENSOR_PARALLEL_SIZE", v.parse_positive_int, 1),
    Setting("max_model_len", "MAX_MODEL_LEN", v.parse_positive_int, 8192),
    Setting("gpus", "GPU_DEVICES", v.parse_gpus, "all"),
    Setting("attention_backend", "ATTENTION_BACKEND", v.parse_attention_backend, "flash_attn"),
    Setting("model_dir", "MODEL_DIR", v.parse_host_path, "./models/model", is_path=True),
    Setting("model_path", None, v.parse_container_path, "/models/model"),
    Setting("draft_dir", "DRAFT_DIR", v.parse_host_path, "./models/draft", is_path=True),
    Setting("draft_path", None, v.parse_container_path, "/models/draft"),
    Setting("start_period", None, v.parse_duration, 900),
    Setting("stop_grace_period", None, v.parse_duration, 30),
    Setting("probation", None, v.parse_probation, 30),
    Setting("restart", None, v.parse_restart, "unless-stopped"),
    Setting("standby", None, v.parse_standby, "stop"),
    Setting("sleep_residue", None, v.parse_size, "1.3G"),
    Setting("gpu_memory_bytes", None, v.parse_optional_size, None),
    Setting("acceptance_floor", None, v.parse_fraction, 0.05),
    Setting("standby_fallback", None, v.parse_standby_fallback, "refuse"),
    Setting("sleep_level", None, v.parse_sleep_level, 1),
    Setting("allow_sleep_level_2_with_speculation", None, v.parse_bool, False),
    Setting("log_max_size", None, v.parse_size, "50MiB"),
    Setting("log_max_files", None, v.parse_log_files, 5),
    Setting("log_probes", None, v.parse_bool, False),
)


VARIANT = "variants.<name>"
SPECULATIVE = "variants.<name>.speculative"


@dataclass(frozen=True)
class Key:
    """One settable key: its table, name, kind, description, and choices for an enum."""

    table: str
    name: str
    kind: str  # string, path, integer, count, boolean, size, duration, fraction, enum, gpus, list,
    # table (NAME = value), object (any table), objects (a list of tables), schedule ([[a, b, K], ...])
    description: str
    choices: tuple[str, ...] = ()

    @property
    def dotted(self) -> str:
        return f"{self.table}.{self.name}"


def _table(table: str, *rows: tuple[Any, ...]) -> tuple[Key, ...]:
    return tuple(Key(table, *row) for row in rows)


KEYS: tuple[Key, ...] = (
    *_table(
        "stack",
        (
            "project",
            "string",
            "compose project name, shared by every variant [default: the stack file's folder name]",
        ),
        ("service", "string", "compose service name, the same for every variant"),
        ("served_model_name", "string", "the model name clients send"),
        ("port", "integer", "host port clients use (1-65535)"),
        ("bind_address", "string", "address the port binds to; 0.0.0.0 exposes it to the network"),
        ("tensor_parallel_size", "integer", "GPUs one variant spans (vLLM --tensor-parallel-size)"),
        ("max_model_len", "integer", "longest prompt plus output in tokens (vLLM --max-model-len)"),
        ("gpus", "gpus", "GPU devices: a list such as 0,1,2,3, all, or none"),
        ("attention_backend", "enum", "vLLM attention backend", v.ATTENTION_BACKENDS),
        ("model_dir", "path", "the model's folder on the host"),
        ("model_path", "string", "where the model is mounted in the container (read-only)"),
        ("draft_dir", "path", "the draft model's folder on the host"),
        ("draft_path", "string", "where the draft model is mounted in the container"),
        ("start_period", "duration", "healthcheck grace while the model loads"),
        ("stop_grace_period", "duration", "time a stopping variant gets before it is killed"),
        ("probation", "duration", "how long a new variant is watched after a swap, in the background"),
        ("restart", "enum", "Docker restart policy of a serving variant", v.RESTART_POLICIES),
        ("standby", "enum", "what a swap does with the variant it leaves", v.STANDBY_MODES),
        ("sleep_residue", "size", "GPU memory a sleeping variant still holds per GPU"),
        ("gpu_memory_bytes", "size", "memory per GPU for the standby planner when none can be probed"),
        ("acceptance_floor", "fraction", "acceptance a speculative variant must exceed after a wake"),
        ("standby_fallback", "enum", "a sleep standby that does not fit", v.STANDBY_FALLBACKS),
        ("sleep_level", "enum", "vLLM sleep level: 1 keeps weights in host RAM, 2 drops them", ("1", "2")),
        ("allow_sleep_level_2_with_speculation", "boolean", "accept vLLM's level-2 drafter bug"),
        ("log_max_size", "size", "a container's log file size before Docker rotates it"),
        ("log_max_files", "integer", "rotated log files Docker keeps per container (1-100)"),
        (
            "log_probes",
            "boolean",
            "keep /health, /metrics and /is_sleeping probes in vLLM's access log (false needs vLLM 0.13+)",
        ),
        ("env", "table", "environment variables for every variant (NAME = value)"),
    ),
    *_table(
        "gateway",
        ("enabled", "boolean", "the gateway owns the shared port (false: the variant publishes it)"),
        ("image", "string", "the gateway's image"),
        (
            "hold_timeout",
            "duration",
            "how long a request may be held, then 503 (default: 5m, or start_period when longer)",
        ),
        ("max_held", "integer", "requests held at once (more get 429 with Retry-After)"),
        ("drain_timeout", "duration", "how long a swap lets in-flight requests finish"),
        ("warmup_requests", "count", "requests sent to a new variant before clients reach it"),
        ("switch_on_model", "boolean", "a request naming a variant's alias switches to it"),
        ("policy", "enum", "auto: switch to the variant [workloads] names for the traffic", POLICIES),
        ("min_residency", "duration", "how long a variant serves after a switch before another"),
        ("residency_wait", "duration", "how long a request for another variant may wait (then 503)"),
        ("policy_window", "duration", "traffic the automatic policy looks at"),
        ("max_head_bytes", "size", "bytes a request head may have (more: 431)"),
        ("head_timeout", "duration", "time a client has to send a request head (then 408)"),
        ("body_timeout", "duration", "time a request body may pause between chunks (then 408)"),
        ("keep_alive_timeout", "duration", "how long an idle client connection stays open"),
        ("max_connections", "integer", "open client connections (past it the oldest idle closes)"),
        ("stall_timeout", "duration", "a stream with no bytes from the backend this long ends (0: off)"),
        (
            "continue_streams",
            "boolean",
            "a streamed completion whose backend breaks goes on on another ready one, token for token",
        ),
        (
            "unresponsive_timeout",
            "duration",
            "a request waiting on a backend whose /health does not answer this long gets 504 (0: off)",
        ),
        ("hold_keepalive", "duration", "SSE comment interval for a held streaming request (0: off)"),
        ("live", "list", "variants that serve at once on disjoint GPUs (a live set)"),
        (
            "spill",
            "count",
            "live routing: send a request to another variant when it has this many fewer outstanding"
            " (0: off)",
        ),
        ("prometheus_image", "string", "the observability profile's Prometheus image"),
        ("prometheus_port", "integer", "host port of the observability profile's Prometheus"),
    ),
    *_table(
        "kubernetes",
        ("models", "enum", "where pods find the models: the node's folders or claims", MODEL_SOURCES),
        ("model_claim", "string", "PersistentVolumeClaim of the model (models = pvc)"),
        ("draft_claim", "string", "PersistentVolumeClaim of the draft model (models = pvc)"),
        ("namespace", "string", "namespace of up --target kubernetes (empty: kubectl's current)"),
        ("service_url", "string", "URL of the Service for the gate (empty: kubectl port-forward)"),
        ("kubectl", "string", "the kubectl command to run"),
        ("context", "string", "kubeconfig context kubectl uses (empty: the current one)"),
        ("kubeconfig", "path", "kubeconfig file kubectl reads (empty: kubectl's default)"),
        ("resources", "object", "CPU, memory and ephemeral-storage requests and limits per pod"),
        ("shm_size", "size", "size limit of the vLLM pod's /dev/shm (a memory emptyDir)"),
        ("node_selector", "object", "node labels the vLLM pod must run on"),
        ("tolerations", "objects", "taints the vLLM pod tolerates (default: nvidia.com/gpu)"),
        ("runtime_class", "string", "RuntimeClass of the vLLM pod (e.g. nvidia)"),
        ("priority_class", "string", "PriorityClass of the vLLM pod"),
        ("service_account", "string", "ServiceAccount of the pods"),
        ("image_pull_policy", "enum", "when the kubelet pulls images", PULL_POLICIES),
        ("image_pull_secrets", "list", "Secrets with registry credentials"),
        ("pdb", "enum", "PodDisruptionBudgets: for the gateway, all pods or none", PDB_CHOICES),
        ("liveness", "duration", "liveness failure budget of a loaded server (0: no probe)"),
        ("gateway_grace", "duration", "gateway's termination grace (0: drain timeout + 35 s)"),
        ("service_monitor", "boolean", "render Prometheus Operator ServiceMonitors"),
        ("monitor_labels", "object", "labels the ServiceMonitors carry (for the Prometheus selector)"),
        ("scrape_interval", "duration", "how often Prometheus scrapes the pods"),
        ("scrape_annotations", "boolean", "add prometheus.io scrape annotations to the pods"),
    ),
    *_table(
        VARIANT,
        ("description", "string", "one line shown by ls"),
        ("extends", "string", "another variant whose keys this one starts from"),
        ("image", "string", "key of the [images] table this variant runs"),
        ("kv_cache_memory", "size", "KV cache size (vLLM --kv-cache-memory)"),
        ("min_kv_cache_tokens", "integer", "tokens the KV cache must hold (checked by doctor)"),
        ("speculative", "table", 'speculative decoding (a table, or "none")'),
        ("env", "table", "environment variables of this variant (NAME = value)"),
        ("extra_args", "list", "extra vLLM arguments, one per item"),
        ("standby", "enum", "this variant's standby (default: stack.standby)", v.STANDBY_MODES),
        ("weights_bytes", "size", "weights in host RAM while asleep (default: read from the model)"),
        ("aliases", "list", "other model names that reach (or switch to) this variant"),
        ("gpus", "gpus", 'GPU set of this variant in a live set; a list for replicas ("0,1", "2,3")'),
        ("replicas", "integer", "containers of this variant in a live set (one GPU set each)"),
    ),
    *_table(
        SPECULATIVE,
        ("method", "enum", "vLLM's speculative method", v.SPECULATIVE_METHODS),
        ("num_speculative_tokens", "integer", "K, tokens proposed per step (1-128)"),
        ("draft_model", "boolean", "mount the draft model and pass it as the speculative model"),
        ("attention_backend", "enum", "the drafter's attention backend", v.ATTENTION_BACKENDS),
        (
            "per_batch_size",
            "schedule",
            "in-server K schedule: [[first_batch, last_batch, K], ...] (dynamic speculative decoding)",
        ),
        ("adaptive_verification", "boolean", "vLLM's per-step adaptive verification budget"),
        ("extra", "table", "more speculative_config fields, passed as written"),
    ),
)


def settable_keys(variants: list[str]) -> list[str]:
    """Every dotted key `--set` takes for a stack with these variants (env tables left out)."""
    keys = [k.dotted for k in KEYS if not k.table.startswith("variants") and k.kind != "table"]
    own = [k for k in KEYS if k.table in (VARIANT, SPECULATIVE) and k.kind != "table" and k.name != "extends"]
    return keys + [k.dotted.replace("<name>", name) for name in variants for k in own]  # extends: the files'
