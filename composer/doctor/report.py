"""`compose-spec doctor`: the known pitfalls as checks, each ok / warn / fail with a fix.

JSON output (`compose-spec doctor --json`), schema 1; keys are stable, new keys may be
added, none removed or renamed without bumping "schema":

    {
      "schema": 1,
      "variant": "mtp" | null,          # the variant asked for; null = every variant
      "checks": [
        {"name": "gpu-memory",          # stable check name (see CHECK_NAMES)
         "status": "ok" | "warn" | "fail",
         "detail": "what was seen",
         "fix": "what to do" | "",      # empty when status is ok
         "variant": "mtp" | null}       # null for stack-wide checks
      ],
      "summary": {"ok": 12, "warn": 1, "fail": 0},
      "capacity": {...}                 # Capacity.as_data(): the figures `up` uses (docs/doctor.md)
    }

Exit code: 1 when any check fails, else 0. Checks that do not apply to a variant
(e.g. draft-k for a variant without a draft model) are left out, not reported ok.
Without GPU facts the GPU checks report `ok` "no GPU: demo only" when the stack asks
for no GPUs (GPU_DEVICES=none), else `warn` "GPU facts not available".
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.capacity.model import Capacity, capacity_of
from composer.doctor import cpu_checks as cck
from composer.doctor import engine_checks as dck
from composer.doctor import gpu_checks as gck
from composer.doctor import host_checks as hck
from composer.doctor import model_checks as mck
from composer.doctor import overlay_checks as ock
from composer.doctor import remote_checks as rck
from composer.doctor import sleep_checks as sck
from composer.doctor import switch_checks as wck
from composer.doctor.preflight import (
    STATUSES,
    Finding,
    VariantFacts,
    check_api_key,
    check_bind_address,
    check_image,
)
from composer.engine.client import Endpoint, current_endpoint
from composer.probes.gpu import GpuProbe
from composer.render.spec import resolve
from composer.render.target import Target, resolve_target
from composer.stack.model import Stack

if TYPE_CHECKING:
    import docker

SCHEMA_VERSION = 1
CHECK_NAMES = (
    "docker-engine",
    "compose-plugin",
    "nvidia-runtime",
    "gpu-count",
    "api-key",
    "env-file",
    "port",
    "userland-proxy",
    "bind-address",
    "model-config",
    "image",
    "image-current",
    "mounts",
    "attention-backend",
    "compute-capability",
    "wsl2-pin-memory",
    "mtp-layers",
    "draft-config",
    "draft-k",
    "gpu-memory",
    "docker-endpoint",
    "client-address",
    "gateway-image",
    "follower",
    "hold-timeout",
    "adaptive-speculation",
    "adaptive-eager",
    "sleep-wait",
)


@dataclass(frozen=True)
class Host:
    """What doctor reads from the machine; tests replace any part."""

    env_file: Path | None
    kernel_release: str
    probe: GpuProbe
    client_factory: Callable[[], docker.DockerClient]
    compose_version: Callable[[], str]
    recipes_dir: Path = Path("images")


def default_host(env_file: str | Path | None) -> Host:
    """This machine: its kernel, the detected GPU probe and the one Docker client factory."""
    from composer.engine.client import compose_version, docker_client
    from composer.probes.gpu import detect_probe

    return Host(
        env_file=Path(env_file) if env_file else None,
        kernel_release=platform.release(),
        probe=detect_probe(),
        client_factory=lambda: docker_client(timeout=30),
        compose_version=compose_version,
    )


@dataclass(frozen=True)
class Report:
    """Every check of one doctor run."""

    variant: str | None
    checks: tuple[Finding, ...] = field(default_factory=tuple)
    capacity: Capacity | None = None

    def summary(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.checks) for s in STATUSES}

    def to_json(self) -> dict:
        """The schema-1 document described in this module's docstring."""
        return {
            "schema": SCHEMA_VERSION,
            "variant": self.variant,
            "checks": [asdict(c) for c in self.checks],
            "summary": self.summary(),
            "capacity": self.capacity.as_data() if self.capacity else None,
        }


def tag(findings: Iterable[Finding | None], variant: str | None) -> list[Finding]:
    """Findings about `variant`; None entries (not applicable) are dropped."""
    return [replace(f, variant=variant) for f in findings if f is not None]


def run_doctor(
    stack: Stack,
    variant: str | None,
    host: Host,
    *,
    allow_weak_key: bool = False,
    follower_attached: bool | None = None,
) -> Report:
    """Run every check for one variant (or all), stack-wide checks first (a weak key only
    warns with `allow_weak_key`; `follower_attached` is what the gateway says, None unknown)."""
    names = [stack.variant(variant).name] if variant else list(stack.variants)
    engine, client = dck.check_engine(host.client_factory, stack.gateway.enabled)
    try:
        facts = gck.gather_gpu_facts(stack, host.probe)
        endpoint = current_endpoint()
        found = [engine, rck.check_endpoint(endpoint), dck.check_compose(host.compose_version)]
        if client is not None:
            found += [dck.check_nvidia_runtime(stack, client), dck.check_gateway_image(stack, client)]
            found.append(dck.live_restore_finding(client.info(), stack.gateway.enabled))
        found += [
            gck.check_gpu_count(stack, facts),
            check_api_key(stack, allow_weak=allow_weak_key),
            hck.check_env_file(host.env_file),
            rck.port_check(stack, client, endpoint),
            dck.check_userland_proxy(stack, endpoint),
            rck.check_client_address(stack, endpoint),
            check_bind_address(stack),
            mck.check_model_config(stack),
            gck.check_standby(stack, facts),
            sck.check_sleep_wait(stack, client),
            wck.check_hold_timeout(stack),
            wck.check_follower(stack, follower_attached),
        ]
        checks = tag(found, None)
        for name in names:
            target = resolve_target(stack, name)
            checks += tag(
                _variant_checks(stack, target, client, endpoint, host.kernel_release, host, facts), name
            )
        capacity = capacity_of(stack, gck.FactsProbe(facts), names)
    finally:
        if client is not None:
            client.close()
    return Report(variant, tuple(checks), capacity)


def variant_facts(target: Target) -> VariantFacts:
    """A variant's facts, read once from its Target: what its checks see."""
    spec = target.spec
    return VariantFacts(
        table=f"variants.{target.name}",
        image=resolve(spec.image),
        mounts=spec.mounts,
        environment=dict(spec.environment),
        speculative=target.variant.speculative,
        dropped_args=target.variant.dropped_args,
        refused=target.variant.refused,
    )


def _variant_checks(
    stack: Stack,
    target: Target,
    client: docker.DockerClient | None,
    endpoint: Endpoint | None,
    release: str,
    host: Host | None = None,
    facts: gck.GpuFacts | None = None,
) -> list[Finding | None]:
    """One variant's checks; without `host` and `facts`, the fast subset. Those that need the
    capacity model or the overlay recipe take the variant itself, the others its facts."""
    variant, seen = target.variant, variant_facts(target)
    found: list[Finding | None] = []
    if client is not None:
        found.append(check_image(client, seen.image))
        if host is not None:
            found.append(ock.check_overlay_current(stack, variant, client, host.recipes_dir, host.env_file))
    found += rck.mount_checks(seen, client, endpoint)
    found.append(gck.check_attention_backend(stack, seen))
    if facts is not None:
        found.append(gck.check_compute_capability(stack, seen, facts))
    found += [
        hck.check_wsl_pin_memory(seen, release),
        mck.check_mtp(stack, seen),
        mck.check_draft_config(stack, seen),
        mck.check_draft_k(stack, seen),
        mck.check_refused(seen),
        mck.check_adaptive(stack, seen),
        mck.check_dropped_eager(seen),
    ]
    if facts is not None:
        found += [gck.check_gpu_memory(stack, variant, facts), cck.check_cpu_method(stack, variant, client)]
    return found


def fast_checks(
    stack: Stack,
    target: Target,
    client: docker.DockerClient | None,
    *,
    allow_weak_key: bool = False,
    kernel_release: str | None = None,
    known: Sequence[Any] | None = None,
) -> list[Finding]:
    """The instant subset for `compose-spec up` (no GPU probing, images checked for presence
    only); the caller refuses to swap when any failed. `known`: the project's containers as
    the swap's snapshot read them (the port check reads them instead of listing Docker's)."""
    release = platform.release() if kernel_release is None else kernel_release
    endpoint = current_endpoint()
    found: list[Finding | None] = [
        check_api_key(stack, allow_weak=allow_weak_key),
        rck.port_check(stack, client, endpoint, known),
        rck.check_client_address(stack, endpoint),
        check_bind_address(stack),
        wck.check_hold_timeout(stack),
    ]
    if client is not None:
        found.append(dck.check_gateway_image(stack, client))
    per_variant = _variant_checks(stack, target, client, endpoint, release)
    return [*tag(found, None), *tag(per_variant, target.name)]


def _grouped(checks: Iterable[Finding]) -> Iterator[tuple[Finding, list[str]]]:
    """Checks with the same status, detail and fix as one entry (first-seen order), with
    the names they cover (`gpu-count`, `gpu-memory [mtp, dflash2]`)."""
    groups: dict[tuple[str, str, str], list[Finding]] = {}
    for check in checks:
        groups.setdefault((check.status, check.detail, check.fix), []).append(check)
    for members in groups.values():
        by_name: dict[str, list[str]] = {}
        for check in members:
            by_name.setdefault(check.name, []).extend([check.variant] if check.variant else [])
        yield members[0], [f"{n} [{', '.join(v)}]" if v else n for n, v in by_name.items()]


def format_report(report: Report) -> str:
    """Human-readable lines: status, check(s), detail, and the fix under it; identical
    findings (the same GPU warning for every check and variant) are printed once."""
    lines = []
    for check, names in _grouped(report.checks):
        lines.append(f"{check.status:<4}  {', '.join(names)}: {check.detail}")
        if check.fix and check.status != "ok":
            lines.append(f"      fix: {check.fix}")
    if report.capacity is not None:
        lines += report.capacity.lines()
    counts = report.summary()
    lines.append(", ".join(f"{counts[s]} {s}" for s in STATUSES))
    return "\n".join(lines)
