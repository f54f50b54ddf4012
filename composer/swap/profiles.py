"""The compose files' optional services (`up ... --with prometheus|follow`): their images are
checked before anything changes, and they start once the variant (or the live set) serves.
The follow profile's container shares folders with the host at the host's own paths, passed
to compose exactly; the state and lock folders are created here first, as this user's.
"""

from __future__ import annotations

import os
from pathlib import Path

from docker.errors import DockerException, ImageNotFound

from composer.engine import retry
from composer.errors import GatewayControlError, PreflightFailed
from composer.gateway.host.client import GatewayControl
from composer.render import follow
from composer.render.prometheus import PROFILE_SERVICES, PrometheusSpec
from composer.render.runfiles import state_dir
from composer.render.spec import resolve
from composer.swap import snapshot
from composer.swap.lock import lock_dir
from composer.swap.transaction import Context, compose_up

FOLLOWER_ATTACH_S = 30.0  # how long `up --with follow` waits for the follower's first report


def _image(ctx: Context, image: str, fix: str) -> None:
    try:
        ctx.client.images.get(image)
    except ImageNotFound:
        name = image.rsplit(":", 1)[0]
        raise PreflightFailed(f"preflight: the {name} image {image} is not here; fix: {fix}") from None


def check_profiles(ctx: Context, prometheus: PrometheusSpec | None) -> None:
    """The images of `options.profiles` are local (checked before anything changes);
    `prometheus`: the stack's Prometheus service (None: the stack has none)."""
    if "prometheus" in ctx.options.profiles and prometheus is not None:
        _image(
            ctx,
            resolve(prometheus.image),
            "make image-prometheus (or set [gateway] prometheus_image)",
        )
    if follow.PROFILE in ctx.options.profiles:
        check_follow_inputs(ctx)
        image = os.environ.get(follow.IMAGE_VAR) or follow.IMAGE
        _image(ctx, image, f"make image-follow (or set {follow.IMAGE_VAR})")


def check_follow_inputs(ctx: Context) -> None:
    """The follower's container sees the stack as `up` does: its files lie in the mounted
    project folder and no `--set` changes it."""
    if ctx.stack.home is None:
        raise PreflightFailed("preflight: --with follow needs a stack file (its folder is mounted)")
    home = Path(ctx.stack.home).resolve()
    for kind, path in [("env file", _env_file(ctx)), *(("stack file", p) for p in ctx.options.stack_files)]:
        resolved = Path(path).resolve()
        if not resolved.is_file() or not resolved.is_relative_to(home):
            raise PreflightFailed(
                f"preflight: --with follow reads the {kind} {path} in its container: it must be a file "
                f"in the project folder {home}, the folder the follow service mounts"
            )
    flags = sorted(key for key, source in ctx.stack.sources.items() if source == "flag --set")
    if flags:
        raise PreflightFailed(
            f"preflight: --with follow runs the stack as its files say, without --set ({', '.join(flags)}): "
            "write those values into a stack file or the env file"
        )


def follow_host_values(ctx: Context) -> dict[str, str]:
    """The follow profile's host values, exactly; creates the state and lock folders."""
    assert ctx.stack.home is not None
    locks = lock_dir()
    locks.mkdir(mode=0o700, parents=True, exist_ok=True)
    state = state_dir()
    state.mkdir(parents=True, exist_ok=True)
    try:  # the group that may use the Docker socket (the user's own when it is not local)
        group = os.stat(follow.SOCKET).st_gid
    except OSError:
        group = os.getegid()
    values = {
        follow.PROJECT_DIR_VAR: str(Path(ctx.stack.home).resolve()),
        follow.ENV_FILE_VAR: os.path.abspath(_env_file(ctx)),
        follow.STACK_VAR: os.pathsep.join(os.path.abspath(p) for p in ctx.options.stack_files)
        or str(Path(ctx.stack.home).resolve() / "composer.toml"),
        follow.STATE_HOME_VAR: str(state.parent.resolve()),
        follow.LOCK_DIR_HOST_VAR: str(locks.resolve()),
        follow.USER_VAR: f"{os.geteuid()}:{group}",
    }
    image = os.environ.get(follow.IMAGE_VAR)
    if image:
        values[follow.IMAGE_VAR] = image
    return values


def _env_file(ctx: Context) -> str:
    assert ctx.stack.home is not None
    return ctx.options.env_file or str(Path(ctx.stack.home) / ".env")


def start_profiles(ctx: Context, compose_file: Path) -> list[str]:
    """Start the optional services of `options.profiles` from `compose_file`; their notes."""
    notes = []
    for profile in ctx.options.profiles:
        service = PROFILE_SERVICES[profile]
        ctx.say(f"starting {service} (the {profile} profile)")
        host = follow_host_values(ctx) if profile == follow.PROFILE else None
        compose_up(ctx, compose_file, service, host)
        extra = " with the Docker socket (Docker's full power)" if profile == follow.PROFILE else ""
        notes.append(f"{service} runs (the {profile} profile){extra}")
        if profile == follow.PROFILE and not _follower_attached(ctx):
            notes.append(
                f"{service} has not reached the gateway within {FOLLOWER_ATTACH_S:.0f}s: alias "
                f"requests are refused until it does (docker logs {ctx.stack.project}-{service}-1)"
            )
    return notes


def _follower_attached(ctx: Context) -> bool:
    """Wait until the started follower has reported to the gateway, so an alias request sent
    right after `up` finds it (False after FOLLOWER_ATTACH_S; True without a gateway to ask)."""
    gateway = snapshot.take(ctx.stack, ctx.client, ask_sleeping=False).gateway
    if gateway is None:
        return True
    control = GatewayControl(gateway)

    def attached() -> bool:
        try:
            found = control.state().follower_attached
        except (GatewayControlError, DockerException) as err:
            raise retry.Pending(f"the gateway did not answer: {err}") from err
        if found is False:
            raise retry.Pending("no report from the follower yet")
        return True  # attached, or an older gateway that does not say

    ctx.say("waiting for the follower to reach the gateway")
    try:
        return retry.follower_attach(FOLLOWER_ATTACH_S)(attached)
    except retry.Pending:
        return False
