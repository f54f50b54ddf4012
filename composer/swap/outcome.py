"""What `up` is asked (`UpOptions`) and what a change did (`UpResult`, one shape for a switch,
a live set's change, `down` and `up --recreate-gateway`, which `report_swap` prints): plain
data, shared by the planners, the executors and the CLI, importing nothing of the swap package."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class UpOptions:
    """How a swap behaves."""

    timeout: float = 900.0
    rollback: bool = True
    wait_for_lock: bool = True
    allow_weak_key: bool = False
    poll_interval: float = 0.1
    release_timeout: float = 60.0
    settle: float = 1.0
    probation: float = 0.0  # seconds the new variant is watched with clients served (stack.probation)
    dry_run: bool = False  # print the plan; change nothing (no lock, no Docker change)
    takeover: bool = False  # replace variants another stack started in this project
    force_recreate: bool = False  # restart the target even when it serves unchanged
    profiles: tuple[str, ...] = ()  # optional services started after the swap (`--with prometheus`)
    env_file: str | None = None  # the env file in force (the follow profile's container reads it)
    stack_files: tuple[str, ...] = ()  # the stack files in force, absolute (the same)
    keep_gateway: bool = False  # never recreate the gateway for changed settings (`follow`)
    by: str | None = None  # what drove the swap when not a person's `up` ("follow"), for the history
    drain: bool = False  # wait for eligible streams too, instead of continuing them (`up --drain`)
    wait_probation: bool = False  # watch the probation before returning (else a watcher process does)


@dataclass
class UpResult:
    """What a change did (`up` of one variant or a set, `down`), with timings in seconds."""

    variant: str  # what it brought in ("+"-joined for a set; down: what ran)
    outcome: str
    previous: str | None = None
    stopped: list[str] = field(default_factory=list)  # down: what it stopped
    timings: dict[str, float] = field(default_factory=dict)
    kv_cache_tokens: int | None = None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    drained: dict[str, int] | None = None  # with a gateway: finished, cut, continued, refused
    plan: dict[str, object] | None = None  # the plan that ran (its as_data)
    plan_text: str | None = None  # the plan as text (its describe)
    serving_container: dict[str, object] | None = None  # name, started_at, restart_count at the end
    port_gap: dict[str, object] | None = None  # the gateway's container was replaced: its port, measured
    probation: dict[str, object] | None = None  # a watcher's: until (ISO), pid, log, outcome `running`

    def to_json(self) -> dict[str, object]:
        return {**self.__dict__, "timings": {k: round(v, 3) for k, v in self.timings.items()}}
