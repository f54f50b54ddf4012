"""Adapters to Docker and to a variant's HTTP API, with no swap policy.

Owns: the one Docker client factory and the one entry point to the `docker compose` CLI
(`client`); what runs, read from labels (`containers`); every Docker verb on a variant
container (`variant_container`); the readiness probe (`health`) and the gate that watches a
starting container as well as its API (`gate`); the gateway probed through its published
host port (`published_port`, `port_gap`); vLLM's boot log (`bootlog`); known failure
signatures with their fixes (`diagnose`); a stack's images and their versions (`images`);
the named wait policies, on tenacity (`retry`); the commands a fix names (`fixes`).
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
