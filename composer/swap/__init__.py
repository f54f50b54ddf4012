"""Switching the serving variant: up, down and status.

Shape: `snapshot` (one read of what runs: the project's containers, each sleep-mode
container's own `/is_sleeping`, the gateway's route, the running swap) -> `plan` (pure:
every decision, the rollback source, the gateway update; `up --dry-run` prints it) ->
`steps` (one small function per step kind: drain, sleep, stop, release wait, start, wake,
route, gate, settle, warm-up, release, gateway update; each returns its outcome, no step
state on a shared object) run by `transaction` (the steps in the plan's order and, on
failure, the rollback plan) -> `journal` (the running swap's record that `status` reads,
and the swap history, written from the plan's and the result's data). `swapper` is the
entry: `prepare` (snapshot, doctor's fast checks, the run file, the plan and its standby
fit) then `execute` (the transaction, the history); `down` stops the project or one
variant's container. The variant is resolved once, into a
`Target`; below the plan, the steps act on the containers the plan names (the sleeper to
wake, the rollback's source) and on facts (the release wait takes the next variant's
budget per GPU, the profiles take the run file), never on the variant's settings again.
`steps.start`, `steps.route` and `steps.gate` work on one container on their own.

Owns: the pure swap plan and its executor (stop the old variant, wait for its GPU memory
to be released, start the new one from its run file, gate it, roll back on any failure),
sleep standby (`standby`: put a variant to sleep and wake it through the gateway; the
memory planner it runs first, `decide_standby`, and the release wait's budget are
`composer.capacity`, the figures doctor prints), the per-project
swap lock, the status
report, and the gateway's published port checked end to end (`gateway_port`:
`recreate_gateway` brings a dead port back, the variant untouched; on a live set it is told
the running live containers from their labels). Uses the rendered
run files, never the templates. May import: `composer.stack`,
`composer.render`, `composer.engine`, `composer.probes`, `composer.capacity`, `composer.doctor` (its fast
checks are the preflight), `composer.gateway` (its control client),
`composer.errors`, `composer.labels`. `follow` runs the switches the gateway demands
(aliases, the automatic policy) through the same `up`, on the host: the gateway never
gets Docker access. A live set (`live`: several variants serving at once on disjoint GPUs,
changed one container at a time: `plan_live` (pure) returns typed operations (`ops`: start,
gate, publish, drain, stop, release wait, each with its inverse) that `execute` runs through a
dispatch table, undoing what ran on a failure or a stop signal; `live_acceptance`: a
speculative member's acceptance check, the Kubernetes live set's too; `live_status`: the live
containers as `status` and `ls` show them; `--with` profiles start from the live run file
once the set serves). `desired` (pure): `up`'s desired set ({X} exclusive, {A, B} side by
side) from the names, the stack and the snapshot; `up_set`: `up`'s one entry on Docker.
Public: `up`, `down`, `down_variant`, `plan_swap`, `decide`, `SwapPlan`, `UpOptions`,
`UpResult`, `Snapshot`, `read_history`, `swap_lock`,
`status_data`, `format_status`, `follow`, `FollowEvent`, `recreate_gateway`, `up_set`,
`plan_live`, `plan_alone`, `LivePlan`, `desired`, `live_rows`, `format_live`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "follow": ["FollowEvent", "follow"],
        "gateway_port": ["recreate_gateway"],
        "journal": ["read_history"],
        "desired": ["desired"],
        "live": ["LivePlan", "plan_alone", "plan_live", "up_set"],
        "live_status": ["format_live", "live_rows"],
        "plan": ["decide"],
        "snapshot": ["Snapshot"],
        "lock": ["swap_lock"],
        "status": ["format_status", "status_data"],
        "down": ["down", "down_variant"],
        "swapper": ["SwapPlan", "UpOptions", "UpResult", "plan_swap", "up"],
    },
)
