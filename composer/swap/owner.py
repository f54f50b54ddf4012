"""Who started what runs in a project: one stack owns it, as its containers' labels record.

`up` refuses to replace or join another stack's containers (`plan.takeover_refusal`); `down`,
`down --volumes` and `down VARIANT` refuse to stop them (`down_refusal`), both unless
`--takeover`; `status` names the owning stack (`owner_status`). All pure, on one snapshot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from composer.render.spec import Owner
from composer.swap.plan import Foreign, foreign_members

if TYPE_CHECKING:
    from composer.stack.model import Stack
    from composer.swap.snapshot import Snapshot


def foreign_running(snap: Snapshot, stack: Stack) -> list[Foreign]:
    """The running containers of the project (live members and the others, each once) that
    another stack started, or this stack file with another served name or API key."""
    running = [(r.name, r.container, r.owner) for r in snap.live_running]
    seen = {r.container for r in snap.live_running}
    running += [
        (m.variant, m.info.name, m.info.owner) for m in snap.members if m.running and m.info.name not in seen
    ]
    return foreign_members(Owner.of(stack), running)


def down_refusal(found: list[Foreign], project: str, command: str) -> str:
    """Why `command` (`down`, `down --volumes`, `down mtp`) refuses another stack's project."""
    first = found[0]
    return (
        f"{first.describe(project)}: `{command}` here would stop what that stack serves and remove its "
        f"gateway's state: stop it from there (`compose-spec -f {first.owner.stack_file} {command}`), "
        "give this stack its own project (-p NAME, or stack.project), or pass --takeover to do it anyway"
    )


def owner_status(snap: Snapshot, stack: Stack) -> dict[str, object] | None:
    """`status`'s `owner`: the stack that started what runs when it is not this one (None: this
    one, or nothing records it); `key_mismatch`: it serves with another API key."""
    found = foreign_running(snap, stack)
    if not found:
        return None
    first = found[0]
    return {
        "stack_file": first.owner.stack_file,
        "other_file": first.other_file,
        "served_name": first.owner.served_name,
        "key_mismatch": any("another API key" in f.differences for f in found),
        "containers": [f.container for f in found],
        "line": (
            f"{first.describe(stack.project)}: this stack's up and down refuse it (--takeover replaces "
            f"it); `compose-spec -f {first.owner.stack_file} status` shows it as its own stack"
        ),
    }
