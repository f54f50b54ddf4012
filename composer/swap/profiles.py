"""The compose files' optional services (`up VARIANT --with prometheus`): their images are
checked before anything changes, and they are started once the variant serves."""

from __future__ import annotations

from composer.errors import PreflightFailed
from composer.render.prometheus import PROFILE_SERVICES
from composer.render.runfiles import run_file
from composer.render.spec import resolve
from composer.render.target import Target
from composer.swap.steps import Context, compose_up


def check_profiles(ctx: Context, target: Target) -> None:
    """The images of `options.profiles` are local (checked before anything changes)."""
    from docker.errors import ImageNotFound

    if "prometheus" in ctx.options.profiles and target.prometheus is not None:
        image = resolve(target.prometheus.image)
        try:
            ctx.client.images.get(image)
        except ImageNotFound:
            raise PreflightFailed(
                f"preflight: the prometheus image {image} is not here; fix: make image-prometheus "
                "(or set [gateway] prometheus_image)"
            ) from None


def start_profiles(ctx: Context, target: Target) -> list[str]:
    """Start the optional services of `options.profiles` (once the variant serves); their notes."""
    notes = []
    for profile in ctx.options.profiles:
        service = PROFILE_SERVICES[profile]
        ctx.say(f"starting {service} (the {profile} profile)")
        compose_up(ctx, run_file(target), service)
        notes.append(f"{service} runs (the {profile} profile)")
    return notes
