"""`capacity`: one memory model of a stack on its GPUs and its host, for doctor and swap alike.

Owns: one pure formula per figure (`figures`): weights per GPU, KV cache per GPU (as vLLM
sizes it), activations, the sleep residue, a sleeper's host RAM and the GPU release budget
(weights + KV cache + activations). `inputs` reads the machine (safetensors headers,
config.json, the GPU probe or `stack.gpu_memory_bytes`, host RAM); `model` turns a
variant's settings into figures in one place (`variant_figures`), and joins them:
`release_budget` (the swap's GPU release wait), `host_ram_asleep` (`status`), `capacity_of`
(doctor's `Capacity`). `standby` plans sleep standby (`plan_standby`, pure; `plan_for`;
`decide_standby`: before anything stops, sleep, stop instead, or refuse with the numbers).
Reads only; never prints. May import: `composer.stack`, `composer.probes`, `composer.errors`.
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
