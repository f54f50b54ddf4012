"""Switching the serving variant: up, down and status.

Shape: `snapshot` (one read of what runs: containers, each sleeper's own `/is_sleeping`, the
gateway's route, the running swap) -> `plan` (pure typed operations, `ops`, each with its
inverse; `up --dry-run` prints them) -> `execute` (a loop over a dispatch table that, on a
failure or the first stop signal, runs the inverses of what ran, newest first; the single
switch's table is `transaction.SingleSwap`, a live change's `transaction.LiveSwapper`) ->
`journal` (the running swap's record and the history). `up_set` (in `entry`) is `up`'s one
entry on Docker: one snapshot, the desired set
(`desired`, pure: {X} exclusive, {A, B} side by side), then the single switch (`swapper`),
a live change (`plan_live`) or `plan_alone` (X replaces a live set). The variant is resolved
once, into a `Target`; below the plan nothing reads its settings again.

Owns: the swap plan and its executors (a single switch: stop or put to sleep the old
variant, wait for its GPU memory, start or wake the new one, gate it, undo on any failure;
a live set: several variants at once on disjoint GPUs, `live_status` as `status`
and `ls` show it), sleep standby (`standby`; its memory planner and the release wait's
budget are `composer.capacity`), `down`, the per-project swap lock, the status report, the
gateway's published port checked end to end (`gateway_port`), and `follow` (the switches
the gateway demands, through the same `up`). Uses the rendered run files, never the
templates. May import: `composer.stack`, `composer.render`, `composer.engine`,
`composer.probes`, `composer.capacity`, `composer.doctor` (its fast checks are the
preflight), `composer.gateway` (its control client), `composer.errors`, `composer.labels`.
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
        "entry": ["up_set"],
        "live_status": ["format_live", "live_rows"],
        "plan": ["LivePlan", "decide", "plan_alone", "plan_live"],
        "snapshot": ["Snapshot"],
        "lock": ["swap_lock"],
        "status": ["format_status", "status_data"],
        "down": ["down", "down_variant"],
        "swapper": ["SwapPlan", "UpOptions", "UpResult", "plan_swap", "up"],
    },
)
