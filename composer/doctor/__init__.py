"""`doctor`: the known pitfalls as one registry of checks, each ok / warn / fail with a fix.

Owns: the check registry and report (`report`), the fast checks that double as the swap
preflight (`preflight`; `report.fast_checks` is the one entry `up` calls), each variant's
facts (`facts.VariantFacts`: image, mounts, environment, speculative settings and the stack
table a fix names, built once per variant by `report.variant_facts`; the per-variant
checks read these, never the stack's `Variant`, except the ones that need the capacity
model or an overlay recipe), and the checks grouped by what they read: the Docker engine
(`engine_checks`), GPUs (`gpu_checks`), the speculative methods vLLM's CPU build refuses
(`cpu_checks`), the host (`host_checks`), checkpoints (`model_checks`), the known costs of
in-server adaptive speculation, an adaptive variant's dropped --enforce-eager and a hybrid
model's notes (`adaptive_checks`), overlay images
(`overlay_checks`), the sleep standby check (`standby_checks`; the planner and every
memory figure are `composer.capacity`, which `up` uses too; the report prints its figures)
and a remote engine's
host: its paths, its port and the address clients use (`remote_checks`). Reads only;
changes nothing (the remote path check creates a container it never starts, then
removes it). `switch_checks` (pure): a follower attached where switching is configured,
and `hold_timeout` against the start budget.
May import: `composer.stack`, `composer.render`, `composer.probes`, `composer.capacity`, `composer.overlay`,
`composer.engine` (reading what runs), `composer.errors`, `composer.labels`.
Public: `run_doctor`, `fast_checks`, `Report`, `Host`, `default_host`, `format_report`, `Finding`,
`VariantFacts`, `variant_facts`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "facts": ["VariantFacts"],
        "preflight": ["Finding"],
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
