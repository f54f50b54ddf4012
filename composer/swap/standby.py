"""Sleep standby in a swap: put the serving variant to sleep, wake a sleeping one, gate it.

A sleep-standby variant runs as its own compose service, `<service>-<variant>` (compose
keeps one container per service and recreates a renamed one, so a sleeping container
needs a service of its own). The gateway is routed to the serving one by its container
name (`GatewayControl.route`); a running sleep-standby container it does not route to is
asleep. That route is the record of who sleeps: no state file, and no network change
(a container reconnected to a network gets a new address, which the gateway's pooled
connections would not follow).

The sleep routes (`/sleep`, `/wake_up`, `/is_sleeping`, `/metrics` for the acceptance
check) are called through the gateway's control channel (`docker exec`), never opened to
clients. Level 1 by default (`stack.sleep_level`); level 2 drops the weights, so its wake
also calls `/collective_rpc reload_weights`, and it is refused at load time for speculative
variants unless `allow_sleep_level_2_with_speculation` (see `standby_plan`).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from composer.engine.containers import sleeping_containers, upstream_url
from composer.engine.variant_container import VariantContainer
from composer.errors import (
    ComposerError,
    GatewayControlError,
    GpuProbeError,
    HealthCheckFailed,
    PreflightFailed,
)
from composer.render.target import Target, resolve_target
from composer.swap.holding import warm_up
from composer.swap.standby_plan import Awake, Sleeper, StandbyPlan, plan_standby

if TYPE_CHECKING:
    import docker

    from composer.engine.gate import GateTarget
    from composer.gateway.client import GatewayControl
    from composer.probes.gpu import GpuProbe
    from composer.stack.model import Stack, Variant

ACCEPTANCE_WARMUP_REQUESTS = 2
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
ACTIVATIONS_PER_GPU = 1_696_512_327  # 1.58 GiB: non-KV runtime memory (an estimate)


def upstream_of(container: VariantContainer) -> str:
    """The gateway's upstream URL for one container, by its own name."""
    return upstream_url(container.name)


def sleeper_of(stack: Stack, client: docker.DockerClient, variant: str) -> VariantContainer | None:
    """The sleeping container of `variant`, if any."""
    for container in sleeping_containers(stack, client):
        if container.describe().variant == variant:
            return container
    return None


def put_to_sleep(control: GatewayControl, container: VariantContainer, variant: str, stack: Stack) -> None:
    """`POST /sleep?level=N` on the serving (drained) variant: the gateway still routes to it."""
    try:
        reply = control.sleep(stack.sleep_level)
    except GatewayControlError as err:
        raise ComposerError(f"could not put {variant} to sleep: {err}") from err
    if reply.status != 200:
        raise ComposerError(f"could not put {variant} to sleep: /sleep answered {reply.status}: {reply.body}")


def wake(control: GatewayControl, container: VariantContainer, variant: str, stack: Stack) -> None:
    """Route the gateway to the sleeping container, then `POST /wake_up` on it."""
    control.route(upstream_of(container))
    try:
        reply = control.wake_up()
    except GatewayControlError as err:
        raise HealthCheckFailed(f"the wake of {variant} failed: {err}") from err
    if reply.status != 200:
        body = str(reply.body)[:300]
        raise HealthCheckFailed(f"the wake of {variant} failed: /wake_up answered {reply.status}: {body}")
    if stack.sleep_level == 2:  # level 2 dropped the weights: read the checkpoint again
        try:
            reply = control.backend("POST", "/collective_rpc", body={"method": "reload_weights"})
        except GatewayControlError as err:
            raise HealthCheckFailed(f"reloading {variant}'s weights after its wake failed: {err}") from err
        if reply.status != 200:
            body = str(reply.body)[:300]
            raise HealthCheckFailed(
                f"reloading {variant}'s weights after its wake failed: /collective_rpc answered "
                f"{reply.status}: {body}"
            )


def check_awake(control: GatewayControl, variant: str) -> None:
    """`/is_sleeping` must say false (`/health` is 200 while asleep)."""
    try:
        sleeping = control.is_sleeping()
    except GatewayControlError as err:
        raise HealthCheckFailed(f"{variant} after its wake: {err}") from err
    if sleeping:
        raise HealthCheckFailed(f"{variant} still reports is_sleeping after its wake")


def spec_counters(text: str) -> tuple[float, float]:
    """(draft tokens, accepted tokens) summed over every label set of a /metrics text."""
    from prometheus_client.parser import text_string_to_metric_families

    totals = {DRAFT_TOKENS: 0.0, ACCEPTED_TOKENS: 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    return totals[DRAFT_TOKENS], totals[ACCEPTED_TOKENS]


def _counters(control: GatewayControl) -> tuple[float, float]:
    reply = control.backend("GET", "/metrics", timeout_s=30.0)
    if reply.status != 200 or not isinstance(reply.body, str):
        raise HealthCheckFailed(f"/metrics answered {reply.status}")
    try:
        return spec_counters(reply.body)
    except ValueError as err:
        raise HealthCheckFailed(f"/metrics could not be read: {err}") from err


def check_acceptance(control: GatewayControl, gate_target: GateTarget, variant: str, floor: float) -> float:
    """Acceptance over a short warm-up after a wake: above `floor`, or HealthCheckFailed.

    A wake can bring a speculative variant back with acceptance 0 (output still correct,
    decoding slower): only the /metrics counters show it.
    """
    drafted_before, accepted_before = _counters(control)
    warm_up(gate_target, ACCEPTANCE_WARMUP_REQUESTS)
    drafted_after, accepted_after = _counters(control)
    drafted = drafted_after - drafted_before
    if drafted <= 0:
        raise HealthCheckFailed(f"{variant} drafted no tokens over the warm-up after its wake")
    rate = (accepted_after - accepted_before) / drafted
    if rate <= floor:
        raise HealthCheckFailed(
            f"{variant} accepts {rate:.2f} of its draft tokens after the wake, at or below the floor "
            f"{floor:.2f} (stack.acceptance_floor): speculation is broken after the wake"
        )
    return rate


def host_memory() -> int | None:
    """The host's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def weights_per_gpu(stack: Stack, variant: Variant) -> int | None:
    """A variant's weights per GPU: `weights_bytes`, else estimated from the checkpoint's
    safetensors headers (model plus draft, split over the GPUs); None when unknown."""
    if variant.weights_bytes is not None:
        return variant.weights_bytes
    from composer.probes.checkpoints import weights_bytes

    dirs = [stack.model_dir]
    if variant.speculative is not None and variant.speculative.draft_model:
        dirs.append(stack.draft_dir)
    try:
        sizes = [weights_bytes(d) for d in dirs]
    except (ComposerError, OSError, ValueError):  # unreadable checkpoint: unknown, the planner says so
        return None
    if any(size is None for size in sizes):
        return None
    return sum(size or 0 for size in sizes) // stack.tensor_parallel_size


def gpu_memory(stack: Stack, probe: GpuProbe | None = None) -> tuple[int | None, str]:
    """Memory of the stack's smallest GPU and where it came from: the GPU probe when it sees
    the stack's GPUs, else `stack.gpu_memory_bytes` (None: unknown)."""
    from composer.probes.gpu import detect_probe, select_gpus

    if stack.gpus is not None:
        probe = probe if probe is not None else detect_probe()
        if probe.available:
            try:
                gpus = select_gpus(probe.gpus(), stack.gpus)
            except GpuProbeError:
                gpus = []
            if gpus:
                return min(g.total_bytes for g in gpus), f"probed by {probe.name}"
    if stack.gpu_memory_bytes is not None:
        return stack.gpu_memory_bytes, "stack.gpu_memory_bytes"
    return None, ""


def kv_bytes_per_token(stack: Stack) -> int | None:
    """KV cache bytes per token per GPU, from the checkpoint's config.json (None: unknown)."""
    from composer.probes.checkpoints import kv_bytes_per_token as model_bytes
    from composer.probes.checkpoints import read_config

    try:
        total = model_bytes(read_config(stack.model_dir))
    except ComposerError:
        return None
    return total // stack.tensor_parallel_size if total else None


def plan_for(
    stack: Stack, target: Target, asleep_after: list[str], probe: GpuProbe | None = None
) -> StandbyPlan:
    """The planner's verdict for `target` serving with `asleep_after` sleeping.

    GPU memory comes from the GPU probe when available, else from `stack.gpu_memory_bytes`.
    At sleep level 2 a sleeper holds no weights in host RAM (they are dropped).
    """
    variant = target.variant
    weights = weights_per_gpu(stack, variant)
    awake = Awake(variant.name, weights, variant.kv_cache_memory, ACTIVATIONS_PER_GPU)
    sleepers = [
        Sleeper(n, 0 if stack.sleep_level == 2 else weights_per_gpu(stack, stack.variant(n)))
        for n in asleep_after
    ]
    memory, source = gpu_memory(stack, probe)
    return plan_standby(
        awake,
        sleepers,
        residue=stack.sleep_residue,
        tensor_parallel=stack.tensor_parallel_size,
        gpu_memory=memory,
        host_memory=host_memory(),
        kv_bytes_per_token=kv_bytes_per_token(stack),
        gpu_source=source,
    )


def refusal(plan: StandbyPlan) -> PreflightFailed:
    """The error of a standby that does not fit, with the numbers and the ways out."""
    return PreflightFailed(
        "preflight: sleep standby does not fit: "
        + "; ".join(plan.problems)
        + '; fix: set standby = "stop" on a variant, set stack.standby_fallback = "stop", '
        "or lower kv_cache_memory"
    )


def check_fits(
    stack: Stack, target: Target, asleep_after: list[str], probe: GpuProbe | None = None
) -> StandbyPlan:
    """Refuse (PreflightFailed, with the numbers) before anything stops when it does not fit."""
    plan = plan_for(stack, target, asleep_after, probe)
    if not plan.fits:
        raise refusal(plan)
    return plan


def target_of(stack: Stack, variant: str) -> Target:
    """The variant's Target (resolved once where a RunningVariant only gives the name)."""
    return resolve_target(stack, variant)


def waited(began: float) -> float:
    """Seconds since `began` (monotonic)."""
    return time.monotonic() - began
