"""Checks of the sleep standby against the vLLM its variants run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from composer.doctor.preflight import Finding
from composer.engine.images import image_facts, sleep_waits

if TYPE_CHECKING:
    import docker

    from composer.stack.model import Stack


def check_sleep_wait(stack: Stack, client: docker.DockerClient | None) -> Finding | None:
    """Does the vLLM of each variant that sleeps take `/sleep?mode=wait` (0.17 and later)? `up`
    sleeps a variant just after the gateway drained it; without `mode=wait` a request the
    engine is still aborting can crash it (vLLM issue 45520). None when no variant sleeps or
    there is no engine to ask."""
    sleepers = [name for name, v in stack.variants.items() if v.standby == "sleep"]
    if not sleepers or client is None:
        return None
    old: list[str] = []
    unknown: list[str] = []
    for key in dict.fromkeys(stack.variants[name].image_key for name in sleepers):
        ref = stack.images[key]
        users = ", ".join(n for n in sleepers if stack.variants[n].image_key == key)
        version = image_facts(client, "vllm", ref).version
        waits = sleep_waits(version)
        if waits is False:
            old.append(f"{users} (vLLM {version}, {ref})")
        elif waits is None:
            unknown.append(ref)
    if old:
        return Finding(
            "sleep-wait",
            "warn",
            "sleep standby on a vLLM without /sleep?mode=wait: "
            + "; ".join(old)
            + ": `up` puts a variant to sleep just after the gateway drained it, and a request "
            "the engine is still aborting can crash it (vLLM issue 45520)",
            'use a vLLM 0.17 or later image, or set standby = "stop" on those variants',
        )
    detail = "the sleeping variants' vLLM takes /sleep?mode=wait: `up` lets it finish before sleeping"
    if unknown:
        detail = (
            f"vLLM version of {', '.join(unknown)} not recorded (`compose-spec version --probe` "
            "reads it): `up` asks the engine before each sleep and waits where it can"
        )
    return Finding("sleep-wait", "ok", detail)
