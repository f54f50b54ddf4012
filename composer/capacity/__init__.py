"""`capacity`: one memory model of a stack on its GPUs and its host, for doctor and swap alike.

Owns: one formula for each figure (`figures`, pure): weights per GPU (the target's share
under TP plus the drafter's under its own TP, or the variant's `weights_bytes`), the KV
cache per GPU (`kv_cache_memory`, else what `--gpu-memory-utilization` leaves after the
weights and the activations, as vLLM sizes it), activations per GPU (an estimate), the
residue each sleeping variant still holds per GPU (`stack.sleep_residue`), the host RAM a
sleeper's weights hold (level 1: weights per GPU x TP; level 2: none) and the GPU release
budget (weights + KV cache + activations: what must be free on each GPU before a variant
starts). `inputs` reads what the formulas need from the machine, by path and by the stack's
GPU settings (safetensors headers, config.json, the GPU probe or `stack.gpu_memory_bytes`,
the host's RAM); `model` turns a variant's settings into numbers in one place
(`variant_inputs`: weights per GPU, the configured KV cache, the memory utilization),
computes the figures from those numbers (`figures_on`) and joins them: `variant_figures`
(the one function for a variant's figures on one GPU), `release_budget` (the swap's GPU
release wait), `host_ram_asleep` (`status`), `capacity_of` (every figure of a stack:
`Capacity`, printed by doctor);
`standby` is the sleep standby planner (`plan_standby`, pure; `plan_for`; `decide_standby`:
the swap's choice before anything stops: sleep, stop instead, or refuse with the numbers).
Reads only; never changes anything; never prints.
May import: `composer.stack`, `composer.probes`, `composer.errors`.
Public: `variant_figures`, `VariantFigures`, `variant_inputs`, `VariantInputs`, `figures_on`,
`release_budget`, `host_ram_asleep`,
`capacity_of`, `Capacity`,
`plan_standby`, `plan_for`, `decide_standby`, `StandbyPlan`, `StandbyDecision`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "model": [
            "Capacity",
            "VariantFigures",
            "VariantInputs",
            "capacity_of",
            "figures_on",
            "host_ram_asleep",
            "release_budget",
            "variant_figures",
            "variant_inputs",
        ],
        "standby": ["StandbyDecision", "StandbyPlan", "decide_standby", "plan_for", "plan_standby"],
    },
)
