"""`down` and `down VARIANT`: stop the project, or one variant's container, under the lock; each
goes to the swap history. `down` keeps the project's named volumes unless `--volumes`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from docker.errors import APIError, NotFound

from composer import labels as label_names
from composer.engine.client import compose
from composer.errors import ComposerError, DownRefused
from composer.stack.model import Stack
from composer.swap.execute import Say, quiet
from composer.swap.journal import append_history
from composer.swap.lock import swap_lock
from composer.swap.snapshot import take
from composer.swap.swapper import UpOptions
from composer.swap.transaction import Context, DockerSwap

if TYPE_CHECKING:
    import docker
    from docker.models.volumes import Volume


def stop_project(ctx: Context, volumes: bool = False) -> list[str]:
    """Stop and remove every variant container, and the project (with `volumes`: its named
    volumes too); return what served: the serving variant's name first, then live members'."""
    snap = take(ctx.stack, ctx.client)
    for member in snap.members:
        ctx.say(f"stopping {member.variant} ({member.container.name})")
        member.container.stop_and_remove(ctx.stack.stop_grace_period)
    current = snap.current
    compose(ctx.stack.project, None, ["down", "--remove-orphans"], timeout=120)
    for volume in project_volumes(ctx.stack, ctx.client) if volumes else ():
        ctx.say(f"removing volume {volume.name}")
        try:
            volume.remove()
        except NotFound:  # gone meanwhile
            continue
        except APIError as err:
            raise ComposerError(
                f"volume {volume.name} could not be removed: {err.explanation or err}"
            ) from err
    return [*([current.variant] if current else []), *(r.name for r in snap.live_running)]


def project_volumes(stack: Stack, client: docker.DockerClient) -> list[Volume]:
    """The project's named volumes (compose labels them with the project), by name."""
    found = client.volumes.list(filters={"label": f"{label_names.COMPOSE_PROJECT}={stack.project}"})
    return sorted(found, key=lambda v: v.name)


def kept_volumes(stack: Stack, client: docker.DockerClient) -> str | None:
    """What a plain `down` says about the volumes it kept (None: the project has none)."""
    names = [v.name for v in project_volumes(stack, client)]
    if not names:
        return None
    several = len(names) > 1
    return (
        f"kept the project's volume{'s' if several else ''} {', '.join(names)} (the gateway's switch "
        f"history{', Prometheus data' if several else ''}): `compose-spec -p {stack.project} down "
        f"--volumes` removes {'them' if several else 'it'}"
    )


def stop_variant(ctx: Context, variant: str, force: bool = False) -> str:
    """Stop one variant's container, asleep or serving; say what was done. The serving one while
    others sleep is refused unless `force`; the only one running is `down` (the whole project)."""
    stack = ctx.stack
    snap = take(stack, ctx.client)
    if any(r.variant == variant for r in snap.live_running):  # the others serve on
        return DockerSwap(ctx).remove(variant, snap)
    mine = [m for m in snap.members if m.variant == variant]
    if not mine:
        return f"{variant} is not running; nothing stopped"
    others = sorted({m.variant for m in snap.members} - {variant})
    asleep = all(m.asleep for m in mine)
    if not asleep and not others:
        stop_project(ctx)
        return f"stopped {variant} (the only variant running: the whole project is down)"
    if not asleep and not force:
        left = sorted({m.variant for m in snap.asleep} - {variant}) or others
        raise DownRefused(
            f"{variant} serves: stopping it leaves nothing serving while {', '.join(left)} sleep "
            f"(clients would be held, then answered 503); `compose-spec up {left[0]}` switches, "
            f"`compose-spec down` stops everything, `compose-spec down {variant} --force` "
            f"stops only {variant}"
        )
    for member in mine:
        ctx.say(f"stopping {variant} ({member.container.name}{', asleep' if asleep else ''})")
        member.container.stop_and_remove(stack.stop_grace_period)
    if asleep:
        return f"stopped {variant} (it was asleep: its GPU residue and host RAM are free)"
    left = ", ".join(others)
    return f"stopped {variant}; nothing serves now ({left} left): `compose-spec up VARIANT` serves one"


def down(
    stack: Stack, *, client: docker.DockerClient, progress: Say = quiet, volumes: bool = False
) -> list[str]:
    """Stop and remove what runs under the project's lock (see `stop_project`)."""
    with swap_lock(stack.project, True, progress):
        stopped = stop_project(Context(stack, client, UpOptions(), progress, progress), volumes)
    source = stopped[0] if stopped and "/" not in stopped[0] else None
    append_history(stack.project, {"kind": "down", "source": source, "target": None, "outcome": "stopped"})
    return stopped


def down_variant(
    stack: Stack, variant: str, *, client: docker.DockerClient, force: bool = False, progress: Say = quiet
) -> str:
    """Stop one variant's container under the project's lock (see `stop_variant`)."""
    with swap_lock(stack.project, True, progress):
        said = stop_variant(Context(stack, client, UpOptions(), progress, progress), variant, force)
    append_history(stack.project, {"kind": "down", "source": variant, "target": None, "outcome": said})
    return said
