"""Adapters to Docker and to a variant's HTTP API, with no swap policy.

Owns: the Docker client and the `docker compose` CLI (`client`), what runs (`containers`,
`variant_container`), readiness and the gate (`health`, `gate`), the published port
(`published_port`, `port_gap`), vLLM's log (`bootlog`, `diagnose`), images (`images`), the
named wait policies (`retry`) and the commands a fix names (`fixes`).
May import: `composer.stack`, `composer.render`, `composer.gateway` (its standard-library
control client), `composer.errors`, `composer.labels`.
Public: `docker_client`, `compose`, `our_containers`, `RunningVariant`, `VariantContainer`,
`probe`, `Readiness`, `wait_ready`, `GateTarget`, `explain`, `hints`, `stack_images`,
`probe_published`, `PortWatch`, `Pending`; the policies are `retry`'s functions.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "client": ["compose", "docker_client"],
        "containers": ["our_containers"],
        "diagnose": ["explain", "hints"],
        "gate": ["GateTarget", "wait_ready"],
        "health": ["Readiness", "probe"],
        "images": ["stack_images"],
        "port_gap": ["PortWatch"],
        "published_port": ["probe_published"],
        "retry": ["Pending"],
        "variant_container": ["RunningVariant", "VariantContainer"],
    },
)
