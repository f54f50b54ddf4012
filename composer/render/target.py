"""Target: a variant resolved once, at the edge, into everything needed to run it."""

from __future__ import annotations

from dataclasses import dataclass

from composer.render.follow import FollowSpec, build_follow_spec
from composer.render.gateway import GatewaySpec, build_gateway_spec
from composer.render.prometheus import PrometheusSpec, build_prometheus_spec
from composer.render.spec import ServiceSpec, build_spec
from composer.stack.model import Stack, Variant


@dataclass(frozen=True)
class Target:
    """A variant, the spec of its container, and the gateway in front of it (None: direct)."""

    variant: Variant
    spec: ServiceSpec
    gateway: GatewaySpec | None = None
    prometheus: PrometheusSpec | None = None  # the observability profile (compose files only)
    follow: FollowSpec | None = None  # the follow profile (compose files only)

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def hash(self) -> str:
        return self.spec.hash


def resolve_target(stack: Stack, name: str) -> Target:
    """Turn a variant name into a Target (UsageError naming the choices when unknown)."""
    variant = stack.variant(name)
    return Target(
        variant,
        build_spec(stack, variant),
        build_gateway_spec(stack),
        build_prometheus_spec(stack),
        build_follow_spec(stack),
    )
