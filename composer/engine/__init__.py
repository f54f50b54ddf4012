"""Adapters to Docker and to a variant's HTTP API, with no swap policy.

Owns: the one Docker client factory and the one entry point to the `docker compose` CLI
(`client`); reading what runs from labels (`containers`); every Docker verb on a variant
container (`variant_container`); the readiness probe (`health`)
and the gate that watches a starting container as well as its API (`gate`); the gateway
probed end to end through its published host port (`published_port`); boot stages
and the KV cache size read from vLLM's log (`bootlog`); known failure signatures with
their fixes (`diagnose`); the images a stack would run, present or not, with their
versions (`images`); the named retry and poll policies every wait uses, on tenacity
(`retry`); the commands a fix names, `make` only from the checkout (`fixes`).
May import: `composer.stack`, `composer.render`,
`composer.gateway` (its standard-library control client), `composer.errors`,
`composer.labels`. Public: `docker_client`, `compose`,
`our_containers`, `RunningVariant`, `probe`, `Readiness`, `wait_ready`,
`watch_settled`, `GateTarget`, `VariantContainer`, `explain`, `hints`, `ImageFacts`,
`stack_images`, `probe_published`, `PublishedPort`, `PortWatch`, `PortGap`, `Pending` and
the policies `until`, `within`, `watch`, `readiness`, `removal`, `gpu_release`, `control_ready`,
`following`, `renewal`, `reopen`, `settle_ready`, `published_refusal`, `port_back`,
`port_answers`, `port_watch`, `service_readiness`, `kube_control_ready`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "client": ["compose", "docker_client"],
        "containers": ["our_containers"],
        "diagnose": ["explain", "hints"],
        "gate": ["GateTarget", "wait_ready", "watch_settled"],
        "health": ["Readiness", "probe"],
        "images": ["ImageFacts", "stack_images"],
        "port_gap": ["PortGap", "PortWatch"],
        "published_port": ["PublishedPort", "probe_published"],
        "retry": [
            "Pending",
            "control_ready",
            "following",
            "gpu_release",
            "kube_control_ready",
            "port_answers",
            "port_back",
            "port_watch",
            "published_refusal",
            "readiness",
            "removal",
            "renewal",
            "reopen",
            "service_readiness",
            "settle_ready",
            "until",
            "watch",
            "within",
        ],
        "variant_container": ["RunningVariant", "VariantContainer"],
    },
)
