"""Checks of the gateway's switching: a follower attached where switching is configured,
and a `hold_timeout` long enough for a variant's start. Pure: the caller reads the gateway."""

from __future__ import annotations

from composer.doctor.preflight import Finding
from composer.stack.model import Stack
from composer.stack.values import format_seconds

FOLLOW_UNIT = "compose-spec follow --print-systemd-unit"


def switching_configured(stack: Stack) -> str | None:
    """What makes the gateway raise switch demands (None when nothing does)."""
    if not stack.gateway.enabled or not stack.gateway.switches:
        return None
    aliased = [name for name, v in stack.variants.items() if v.aliases]
    reasons = []
    if stack.gateway.switch_on_model and aliased:
        reasons.append(f"aliases of {', '.join(aliased)} with switch_on_model")
    elif stack.gateway.switch_on_model:
        reasons.append("switch_on_model")
    if stack.gateway.policy == "auto":
        reasons.append("policy = 'auto'")
    return " and ".join(reasons)


def follower_warning(stack: Stack, attached: bool | None) -> str | None:
    """One line when switching is configured and the gateway says no follower is attached
    (no long poll within 30 s); None when all is well or the gateway could not say."""
    configured = switching_configured(stack)
    if configured is None or attached is not False:
        return None
    return (
        f"switching is configured ({configured}) but no compose-spec follow is attached to the "
        "gateway: alias and automatic-policy requests for another variant get 503 at once"
    )


def check_follower(stack: Stack, attached: bool | None) -> Finding | None:
    """doctor's finding for the follower (None when switching is off or the gateway is not read)."""
    configured = switching_configured(stack)
    if configured is None or attached is None:
        return None
    if attached:
        return Finding("follower", "ok", f"a compose-spec follow is attached ({configured})")
    return Finding(
        "follower",
        "warn",
        str(follower_warning(stack, attached)),
        f"run `compose-spec follow` (keep it running: `{FOLLOW_UNIT}`)",
    )


def check_hold_timeout(stack: Stack) -> Finding | None:
    """A held request must not give up before a variant can have started: `[gateway]
    hold_timeout` against `start_period`, the start budget (None without a gateway)."""
    hold, start = stack.gateway.hold_timeout, stack.start_period
    if not stack.gateway.enabled:
        return None
    if hold >= start:
        return Finding(
            "hold-timeout",
            "ok",
            f"hold_timeout {format_seconds(hold)} covers start_period {format_seconds(start)}",
        )
    return Finding(
        "hold-timeout",
        "warn",
        f"[gateway] hold_timeout ({format_seconds(hold)}) is shorter than the start budget start_period "
        f"({format_seconds(start)}): requests held during a cold start get 503 before the variant is ready",
        f"set [gateway] hold_timeout to at least {format_seconds(stack.start_period)}, or lower "
        "start_period to the variant's measured load time",
    )
