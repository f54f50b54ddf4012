"""Switching the serving variant: up, down and status.

Shape: `snapshot` (one read of what runs: the project's containers, each sleep-mode
container's own `/is_sleeping`, the gateway's route, the running swap) -> `plan` (pure:
typed operations, `ops`, that carry their arguments, each with its inverse; `up --dry-run`
prints them) -> `execute` (one executor for every change of what serves: a loop over a
dispatch table that, on a failure or the first stop signal, runs the inverses of what ran,
newest first) with the single switch's Docker dispatch table (`transaction.SingleSwap`)
-> `journal` (the running swap's record that `status` reads, and the swap history).
`swapper` is the entry: `prepare` (snapshot, doctor's fast checks, the run file, the plan
and its standby fit) then `execute`; `down` stops the project or one variant's container.
The variant is resolved once, into a `Target`; below the plan the handlers act on what the
operations carry, never on the variant's settings again.

Owns: the swap plan and its executors (a single switch: stop or put to sleep the old
variant, wait for its GPU memory, start or wake the new one, gate it, undo on any failure;
a live set, `live`: several variants at once on disjoint GPUs, its plan `plan_live` of the
same operations, `live_status` as `status` and `ls` show it), sleep standby (`standby`;
its memory planner and the release wait's budget are `composer.capacity`), the
per-project swap lock, the status report, and the gateway's published port checked end to
end (`gateway_port`). Uses the rendered run files, never the templates. `follow` runs the
switches the gateway demands through the same `up`, on the host. May import:
`composer.stack`, `composer.render`, `composer.engine`, `composer.probes`,
`composer.capacity`, `composer.doctor` (its fast checks are the preflight),
`composer.gateway` (its control client), `composer.errors`, `composer.labels`.
`desired` (pure): `up`'s desired set ({X} exclusive, {A, B} side by side) from the names,
the stack and the snapshot; `up_set` (in `live`): `up`'s one entry on Docker, which takes
the snapshot once and runs the single switch, the live change or `plan_alone` (X replaces
a running live set).
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
