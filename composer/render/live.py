"""A live set rendered: one compose service per live container, all behind the one gateway.

Each member (`mtp/1`) is the service `<service>-<variant>-<n>` on its own GPU set, labelled
`live` and `gpus`; the gateway's `GATEWAY_LIVE_UPSTREAMS` (JSON) lists every member, so
`docker compose -f compose/live.yml up -d` starts the whole set.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from composer import labels as label_names
from composer.render.files import RenderedFile, render_template
from composer.render.follow import FollowSpec, build_follow_spec
from composer.render.gateway import GatewaySpec, build_gateway_spec
from composer.render.prometheus import PrometheusSpec, build_prometheus_spec
from composer.render.spec import (
    CONTAINER_PORT,
    ServiceSpec,
    build_spec,
    labelled,
    text,
)
from composer.stack.model import Stack
from composer.stack.placement import LiveMember, live_members

LIVE_UPSTREAMS_VAR = "GATEWAY_LIVE_UPSTREAMS"
LIVE_FILE = "live.yml"


@dataclass(frozen=True)
class LiveService:
    """One live container: its member (name, variant, GPUs) and its container spec."""

    member: LiveMember
    spec: ServiceSpec
    alone_hash: str = ""  # the config hash of the variant's one serving container that can join as it

    @property
    def name(self) -> str:
        return self.member.name

    @property
    def url(self) -> str:
        """Where the gateway reaches it on the project's network (the service's DNS name)."""
        return f"http://{self.spec.compose_service}:{CONTAINER_PORT}"

    def upstream(self) -> dict[str, str]:
        """The gateway's upstream entry (GATEWAY_LIVE_UPSTREAMS, `set_upstreams`)."""
        return {"name": self.member.name, "variant": self.member.variant, "url": self.url}


@dataclass(frozen=True)
class LiveTarget:
    """A live set resolved once: its variants, one LiveService per container, the gateway."""

    variants: tuple[str, ...]
    services: tuple[LiveService, ...]
    gateway: GatewaySpec | None
    prometheus: PrometheusSpec | None = None  # the observability profile: scrapes every member
    follow: FollowSpec | None = None  # the follow profile

    @property
    def hash(self) -> str:
        """A digest of every member's config hash (names the run file)."""
        joined = ",".join(f"{s.name}={s.spec.hash}" for s in self.services)
        return hashlib.sha256(joined.encode()).hexdigest()[:16]


def live_spec(stack: Stack, member: LiveMember) -> ServiceSpec:
    """The container spec of one live member: the variant's spec under its own service and GPUs."""
    variant = replace(stack.variant(member.variant), standby="stop")  # a live container never sleeps
    base = build_spec(stack, variant)
    # with GPU_DEVICES=none (the simulator) no device reservation: the set stays a label
    gpus = text(",".join(member.gpus)) if member.gpus and base.gpus is not None else base.gpus
    spec = replace(base, service=f"{stack.service}-{member.variant}-{member.index}", gpus=gpus, labels=())
    return labelled(stack, spec, (label_names.GPUS, member.gpus_text), (label_names.LIVE, member.name))


def alone_hash(stack: Stack, member: LiveMember) -> str:
    """The config hash of the variant's one serving container when it can join as `member` in place
    ("" for a later replica, another GPU set, or a sleep-standby variant)."""
    variant = stack.variant(member.variant)
    same_gpus = stack.gpus is None or not member.gpus or set(member.gpus) == set(stack.gpus)
    if member.index != 1 or variant.standby != "stop" or not same_gpus:
        return ""
    return build_spec(stack, variant).hash


def with_upstreams(gateway: GatewaySpec, upstreams: list[dict[str, str]]) -> GatewaySpec:
    """The gateway with a live set's upstreams in its environment (`GATEWAY_LIVE_UPSTREAMS`)."""
    listed = json.dumps(upstreams, separators=(",", ":"))
    return replace(gateway, environment=(*gateway.environment, (LIVE_UPSTREAMS_VAR, text(listed))))


def resolve_live(stack: Stack, variants: Sequence[str]) -> LiveTarget:
    """Resolve a live set (ConfigError, exit 2, for unknown names or overlapping GPU sets)."""
    services = tuple(
        LiveService(m, live_spec(stack, m), alone_hash(stack, m)) for m in live_members(stack, list(variants))
    )
    gateway = build_gateway_spec(stack)
    if gateway is not None:
        gateway = with_upstreams(gateway, [s.upstream() for s in services])
    prometheus = build_prometheus_spec(
        stack, [(s.name, s.member.variant, s.spec.compose_service) for s in services]
    )
    return LiveTarget(tuple(variants), services, gateway, prometheus, build_follow_spec(stack))


def render_live(target: LiveTarget, out_dir: Path, name: str = LIVE_FILE) -> list[RenderedFile]:
    """The live set's compose file, in memory (a RenderedFile)."""
    content = render_template("compose-live.yml.j2", "the live set", live=target)
    return [RenderedFile(out_dir / name, content, 0o644)]
