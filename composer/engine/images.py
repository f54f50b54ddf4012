"""What the engine knows about the images a stack would run: present or not, id, version
(from the image's labels, else, with `probe=True`, `vllm --version` run offline in it).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from composer.stack.model import Stack

if TYPE_CHECKING:
    import docker

VERSION_LABELS = ("vllm-composer.vllm-version", "org.opencontainers.image.version")
SLEEP_WAITS_SINCE = (0, 17)
"""vLLM's `/sleep?mode=wait` (finish what is in flight, then sleep) exists since 0.17; before,
a sleep while requests are still decoding or being aborted can crash the engine (vLLM issue
45520) although `/sleep` answers 200."""


def release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a vLLM version string (`0.17.1`, `v0.32.0+cu128`); None when unreadable."""
    found = re.match(r"v?(\d+)\.(\d+)", version.strip())
    return (int(found[1]), int(found[2])) if found else None


def sleep_waits(version: str) -> bool | None:
    """Whether that vLLM takes `/sleep?mode=wait` (None: the version is unknown)."""
    known = release(version)
    return None if known is None else known >= SLEEP_WAITS_SINCE


@dataclass(frozen=True)
class ImageFacts:
    """One image the stack names: its role, reference, whether it is here, and what it says."""

    role: str
    ref: str
    present: bool | None  # None: the engine could not be asked
    image_id: str = ""
    version: str = ""
    used_by: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "used_by": list(self.used_by)}


def image_facts(
    client: docker.DockerClient | None,
    role: str,
    ref: str,
    used_by: tuple[str, ...] = (),
    probe: bool = False,
) -> ImageFacts:
    """What the engine says about `ref` (present is None without an engine)."""
    if client is None:
        return ImageFacts(role, ref, None, used_by=used_by)
    from docker.errors import DockerException, ImageNotFound

    try:
        image = client.images.get(ref)
    except ImageNotFound:
        return ImageFacts(role, ref, False, used_by=used_by)
    except DockerException:
        return ImageFacts(role, ref, None, used_by=used_by)
    labels = image.labels or {}
    version = next((labels[k] for k in VERSION_LABELS if labels.get(k)), "")
    if not version and probe and role == "vllm":  # `vllm --version` in a throwaway container
        try:
            out = client.containers.run(
                ref,
                ["--version"],
                entrypoint=["vllm"],
                network_mode="none",
                remove=True,
                stdout=True,
                stderr=False,
            )
            version = (out.decode(errors="replace").strip().splitlines() or [""])[-1].strip()
        except Exception:  # no vllm in the image, or it failed: the version stays unknown
            pass
    return ImageFacts(role, ref, True, image.short_id.removeprefix("sha256:"), version, used_by)


def stack_images(stack: Stack, client: docker.DockerClient | None, probe: bool = False) -> list[ImageFacts]:
    """The gateway image (when the gateway is on) and every vLLM image the variants use."""
    facts = []
    if stack.gateway.enabled:
        facts.append(image_facts(client, "gateway", stack.gateway.image, ("gateway",)))
    for key, ref in stack.images.items():
        users = tuple(name for name, v in stack.variants.items() if v.image_key == key)
        if users:
            facts.append(image_facts(client, "vllm", ref, users, probe))
    return facts
