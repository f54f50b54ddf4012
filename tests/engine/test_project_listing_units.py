"""One listing of the project's containers, without Docker: another project's are never
inspected, and a container removed between the listing and its inspection is left out."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from docker.errors import NotFound

from composer.engine.containers import our_containers, project_containers

STACK = cast(Any, SimpleNamespace(project="p", service="vllm"))
VARIANT, PROJECT, SERVICE = (
    "vllm-composer.variant",
    "com.docker.compose.project",
    "com.docker.compose.service",
)
CONTAINERS = {
    "ours": ({VARIANT: "mtp", PROJECT: "p", SERVICE: "vllm"}, "p-vllm-1", "3"),
    "theirs": ({VARIANT: "x", PROJECT: "q", SERVICE: "vllm"}, "q-vllm-1", "4"),
    "launched": ({VARIANT: "mtp"}, "p-vllm-1", "2"),
    "live": ({VARIANT: "mtp", PROJECT: "p", "vllm-composer.live": "mtp"}, "p-live-mtp-1", "5"),
    "gateway": ({PROJECT: "p", "vllm-composer.role": "gateway"}, "p-gateway-1", "1"),
    "spare": ({PROJECT: "p", "vllm-composer.role": "gateway"}, "p-gateway-2", "1"),
}


class _Docker:
    def __init__(self, removed: set[str]) -> None:
        self.removed, self.inspected = removed, []
        self.api, self.containers = SimpleNamespace(containers=self.listing), SimpleNamespace(get=self.get)

    def get(self, container_id: str) -> SimpleNamespace:
        self.inspected.append(container_id)
        if container_id in self.removed:
            raise NotFound("removed")
        labels, name, created = CONTAINERS[container_id]
        return SimpleNamespace(id=container_id, labels=labels, name=name, attrs={"Created": created})

    def listing(self, all: bool, filters: dict | None = None) -> list[dict]:
        listed = [(i, c) for i, c in CONTAINERS.items() if not filters or VARIANT in c[0]]
        return [{"Id": i, "Labels": c[0], "State": "running", "Names": [f"/{c[1]}"]} for i, c in listed]


def _ids(found: list) -> list[str]:
    return [c.container.id for c in found]


def test_the_listing_holds_the_variants_newest_first_and_the_gateways() -> None:
    docker = _Docker(set())
    variants, gateway, others = project_containers(STACK, cast(Any, docker))
    assert _ids(variants) == ["live", "ours", "launched"] and gateway.id == "gateway" and others == ("spare",)
    assert "theirs" not in docker.inspected
    assert _ids(our_containers(STACK, cast(Any, docker))) == ["ours", "launched"]  # live members left out


def test_a_container_removed_after_the_listing_is_left_out() -> None:
    variants, gateway, _ = project_containers(STACK, cast(Any, _Docker({"launched", "gateway"})))
    assert _ids(variants) == ["live", "ours"] and gateway is None
