"""`bench`: what each variant and K really gives, measured on a running server.

Owns: the sweep over workloads, prompt length x streams, and output agreement (`sweep`), its
swaps through the gated `up` and K hints (`swaps`), the streaming client and `/metrics`
acceptance (`client`), prompts (`prompts`), the report (`report`), the per-workload
recommendation and its `[workloads]` block (`recommend`), and `bench --decide`: its arms and
the switch-or-adapt decision over a phase-changing trace (`decide`), with the switching arm
measured through the gateway's policy (`switch_run`).
May import: `composer.stack`, `composer.render`, `composer.engine`, `composer.probes`,
`composer.swap`, `composer.errors`. Public: `BenchOptions`, `Workload`, `run_bench`,
`bench_with_swaps`, `report_data`, `format_table`, `write_outputs`, `winners`,
`workloads_block`, `write_workloads`, `plan_arms`, `decide`, `format_decision`,
`decision_data`, `write_decision`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "decide": ["decide", "decision_data", "format_decision", "plan_arms", "write_decision"],
        "recommend": ["winners", "workloads_block", "write_workloads"],
        "report": ["format_table", "report_data", "write_outputs"],
        "swaps": ["bench_with_swaps"],
        "sweep": ["BenchOptions", "Workload", "run_bench"],
    },
)
