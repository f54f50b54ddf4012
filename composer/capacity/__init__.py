"""`capacity`: one memory model of a stack on its GPUs and its host, for doctor and swap alike.

Owns: one pure formula per figure (`figures`: weights, KV cache, activations, sleep residue,
a sleeper's host RAM, the release budget), what they read from the machine (`inputs`), a
variant's figures from its settings in one place (`model`: `variant_figures`, with
`release_budget`, `host_ram_asleep`, `capacity_of`) and the sleep standby planner
(`standby`). Reads only; never prints.
May import: `composer.stack`, `composer.probes`, `composer.errors`.
Public: `variant_figures`, `VariantFigures`, `release_budget`, `host_ram_asleep`,
`capacity_of`, `Capacity`, `plan_standby`, `plan_for`, `decide_standby`, `StandbyPlan`,
`StandbyDecision`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "model": [
            "Capacity",
            "VariantFigures",
            "capacity_of",
            "host_ram_asleep",
            "release_budget",
            "variant_figures",
        ],
        "standby": ["StandbyDecision", "StandbyPlan", "decide_standby", "plan_for", "plan_standby"],
    },
)
