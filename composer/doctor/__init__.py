"""`doctor`: the known pitfalls as one registry of checks, each ok / warn / fail with a fix.

Owns: the registry and report (`report`; `report.fast_checks` is the swap's preflight), the
checks doctor and the preflight share (`preflight`), and the checks grouped by what they
read (`*_checks`: the engine, GPUs, vLLM's CPU build, the host, checkpoints, overlay images,
a remote engine's host, the gateway's switching). Reads only (the remote mount check
creates a container it never starts, then removes it).
May import: `composer.stack`, `composer.render`, `composer.probes`, `composer.capacity`, `composer.overlay`,
`composer.engine` (reading what runs), `composer.errors`, `composer.labels`.
Public: `run_doctor`, `fast_checks`, `Report`, `Host`, `default_host`, `format_report`, `Finding`,
`VariantFacts`, `variant_facts`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "preflight": ["Finding", "VariantFacts"],
        "report": [
            "Host",
            "Report",
            "default_host",
            "fast_checks",
            "format_report",
            "run_doctor",
            "variant_facts",
        ],
    },
)
