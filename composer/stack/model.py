"""The typed, validated description of a stack: shared settings, images, variants."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from composer.errors import ConfigError, unknown_choice
from composer.stack.gateway import GatewaySettings
from composer.stack.kubernetes import KubeSettings


@dataclass(frozen=True)
class Speculative:
    """A variant's speculative decoding settings."""

    method: str
    num_speculative_tokens: int
    draft_model: bool = False
    attention_backend: str | None = None
    extra: tuple[tuple[str, object], ...] = ()
    per_batch_size: tuple[tuple[int, int, int], ...] | None = None  # [start_bs, end_bs, K] ranges
    adaptive_verification: bool = False  # vLLM's enable_adaptive_verification (V2 model runner)


@dataclass(frozen=True)
class Variant:
    """One container flavour of the model."""

    name: str
    image_key: str
    kv_cache_memory: int | None
    speculative: Speculative | None
    env: tuple[tuple[str, str], ...] = ()
    extra_args: tuple[str, ...] = ()
    min_kv_cache_tokens: int | None = None
    description: str = ""
    standby: str = "stop"  # "sleep": `up` puts it to sleep (level 1) instead of removing it
    weights_bytes: int | None = None  # weights per GPU, for the standby memory planner
    aliases: tuple[str, ...] = ()  # model names that ask for this variant ([gateway] switch_on_model)
    gpus: tuple[tuple[str, ...], ...] = ()  # placement: one GPU set per replica (empty: stack.gpus)
    replicas: int = 1  # containers of this variant in a live set
    dropped_args: tuple[tuple[str, str], ...] = ()  # (argument, its key) an adaptive variant drops
    refused: str = ""  # why vLLM refuses it under a stack-wide setting: nothing starts it


@dataclass(frozen=True)
class Stack:
    """Everything needed to derive a container spec for any variant."""

    project: str
    service: str
    served_model_name: str
    port: int
    bind_address: str
    tensor_parallel_size: int
    max_model_len: int
    gpus: tuple[str, ...] | None
    attention_backend: str
    model_dir: str
    model_path: str
    draft_dir: str
    draft_path: str
    start_period: int
    stop_grace_period: int
    images: dict[str, str]
    variants: dict[str, Variant]
    workloads: dict[str, str]
    env: tuple[tuple[str, str], ...] = ()
    kubernetes: KubeSettings = field(default_factory=KubeSettings)
    restart: str = "unless-stopped"
    probation: int = 30  # seconds `up` watches a new variant after its swap; a crash then rolls back
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    standby: str = "stop"  # the variants' default standby
    sleep_residue: int = 1_395_864_371  # GPU bytes a sleeping variant still holds per GPU (1.3 GiB)
    gpu_memory_bytes: int | None = None  # per GPU, for the planner when no GPU can be probed
    acceptance_floor: float = 0.05  # a speculative variant's acceptance after a wake must exceed it
    standby_fallback: str = "refuse"  # a sleep standby that does not fit: refuse, or stop instead
    sleep_level: int = 1  # vLLM sleep level; 2 drops the weights (reloaded from disk on wake)
    allow_sleep_level_2_with_speculation: bool = False  # accept vLLM's level-2 drafter bug
    log_max_size: int = 52_428_800  # bytes of one container log file before Docker rotates it
    log_max_files: int = 5  # rotated log files Docker keeps per container
    log_probes: bool = False  # keep the probes' lines (/health, /metrics, /is_sleeping) in vLLM's access log
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    written: dict[str, object] = field(default_factory=dict, compare=False)  # values as written
    api_key: str | None = field(default=None, repr=False, compare=False)
    home: Path | None = field(default=None, compare=False)  # the folder of the first stack file
    owner_file: str | None = field(default=None, compare=False)  # the command line's first stack file

    @property
    def render_dir(self) -> Path:
        """Where `render` writes by default: `compose/` next to the (first) stack file."""
        return (self.home or Path.cwd()) / "compose"

    def variant(self, name: str) -> Variant:
        """The named variant, or a UsageError listing the known ones."""
        try:
            return self.variants[name]
        except KeyError:
            raise unknown_choice("variant", name, self.variants) from None

    def startable(self, name: str) -> Variant:
        """The named variant; ConfigError when vLLM would refuse it, UsageError when there is none."""
        variant = self.variant(name)
        if variant.refused:
            raise ConfigError(variant.refused)
        return variant

    def image(self, key: str) -> str:
        return self.images[key]

    def workload_variant(self, workload: str) -> Variant:
        if workload not in self.workloads:
            raise unknown_choice("workload", workload, self.workloads)
        return self.variant(self.workloads[workload])


def image_env_var(key: str) -> str:
    """The environment variable that overrides an image: `vllm` -> `VLLM_IMAGE`."""
    return "".join(c if c.isalnum() else "_" for c in key).upper() + "_IMAGE"
