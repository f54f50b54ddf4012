"""Changing what serves (up, down) and showing it (status, ls, ps, logs, follow).

Shape: `snapshot` (one read of what runs) -> `desired` (pure) -> `plan` (pure typed operations,
`ops`, each with its inverse) -> `runner` (every change: its running record, `execute`'s loop
over an engine's dispatch table, `transaction`'s on Docker, that undoes what ran on a failure
or a stop signal, and one history line, `journal`). `entry.up_set` is `up`'s one entry on
Docker (the CLI, `follow` and the bench call it); below the plan nothing reads the variant's
settings.

Owns: the swap plan and its executors (a single switch; a live set, several variants at
once on disjoint GPUs), sleep standby (`standby`; its memory planner and the release wait's
budget are `composer.capacity`), `down` (planned and drained like a switch) and `restart`'s
target, which stack owns a project (`owner`: its containers' labels), the per-project swap
lock, the probation's watcher process that goes on after `up` returned (`probation`), the
status report, the gateway's published port checked end to end (`gateway_port`), and
`follow` (the switches the gateway demands, through the same `up`). Uses the rendered run
files, never the templates. May import: `composer.stack`, `composer.render`, `composer.engine`,
`composer.probes`, `composer.capacity`, `composer.doctor` (its fast checks are the
preflight), `composer.gateway` (its control client), `composer.errors`, `composer.labels`.
Public: `down`, `down_variant`, `plan_swap`, `decide`, `Plan`, `UpOptions`, `UpResult`,
`Snapshot`, `read_history`, `swap_lock`, `status_data`, `format_status`, `follow`, `FollowEvent`,
`recreate_gateway`, `up_set`, `plan_live`, `plan_alone`, `desired`, `live_rows`, `format_live`.
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
        "plan": ["Plan", "decide", "plan_alone", "plan_live"],
        "snapshot": ["Snapshot"],
        "lock": ["swap_lock"],
        "status": ["format_live", "format_status", "live_rows", "status_data"],
        "down": ["down", "down_variant"],
        "outcome": ["UpOptions", "UpResult"],
        "swapper": ["plan_swap"],
    },
)
