"""Docker fixtures for overlay builds: a small stand-in base image and recipe folders."""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import remove_containers

from .diffs import INIT_PY, METHODS_PY

TEST_LABEL = "vllm-composer.test"  # the shared conftest's label
SESSION_LABEL = f"{TEST_LABEL}.session"
SESSION = uuid.uuid4().hex
TEST_LABELS = {TEST_LABEL: "1", SESSION_LABEL: SESSION}  # cleanup removes only this session's


def in_ci() -> bool:
    """True under CI=true, where a missing image must fail rather than skip."""
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


BASE_OS = "vllm-composer-base:bookworm"
SITE = "/opt/site"
STANDIN_DOCKERFILE = f"""FROM {BASE_OS}
COPY vllm {SITE}/vllm
ENV PYTHONPATH={SITE}
ENTRYPOINT ["false"]
LABEL {TEST_LABEL}=1 {SESSION_LABEL}={SESSION}
"""


def require_image(client, ref: str, how: str) -> None:
    """Fail under CI=true, else skip, when a locally built image is missing."""
    from docker.errors import ImageNotFound

    try:
        client.images.get(ref)
    except ImageNotFound:
        message = f"image {ref} is missing: {how}"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)


def _context() -> io.BytesIO:
    files = {
        "Dockerfile": STANDIN_DOCKERFILE,
        "vllm/__init__.py": INIT_PY,
        "vllm/config/__init__.py": "",
        "vllm/config/methods.py": METHODS_PY,
        "vllm/spec/__init__.py": "",
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


@pytest.fixture(scope="session")
def standin_base(docker_client) -> Iterator[str]:
    """A tiny image with a stand-in `vllm` package under /opt/site (built offline)."""
    require_image(docker_client, BASE_OS, "run `make base-image`")
    tag = f"vct-overlay-base-{uuid.uuid4().hex[:8]}:1"
    _image, _ = docker_client.images.build(
        fileobj=_context(), custom_context=True, tag=tag, network_mode="none", pull=False, rm=True
    )
    yield tag
    remove_test_images(docker_client)


def remove_test_images(client) -> None:
    """Remove every container and image this test session labelled."""
    session = {"label": f"{SESSION_LABEL}={SESSION}"}
    remove_containers(client, session)
    images = client.images.list(filters=session)  # children inherit labels: newest first
    for image in sorted(images, key=lambda i: i.attrs.get("Created", ""), reverse=True):
        with contextlib.suppress(Exception):  # already gone with a child
            client.images.remove(image.id, force=True)


@pytest.fixture
def output_tag(docker_client) -> Iterator[str]:
    """A unique output tag, removed after the test."""
    tag = f"vct-overlay-out-{uuid.uuid4().hex[:8]}:1"
    yield tag
    with contextlib.suppress(Exception):
        docker_client.images.remove(tag, force=True)


def write_recipe(
    folder: Path,
    diffs: dict[str, str],
    verify: str = "",
    pins: dict[str, str] | None = None,
    strip: int | None = None,
) -> Path:
    """A recipe folder `folder/r` whose base is @images.vllm and tag @images.dflash2."""
    from composer.overlay.diff import sha256_hex

    recipe = folder / "r"
    recipe.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, text in diffs.items():
        (recipe / name).write_text(text)
        pin = (pins or {}).get(name, sha256_hex(text.encode()))
        strip_line = f"strip = {strip}\n" if strip is not None else ""
        entries.append(f'[[diffs]]\nfile = "{name}"\nsha256 = "{pin}"\nskip = ["tests/*"]\n{strip_line}')
    verify = verify or "import vllm.spec.dflash, vllm.config.methods as m; assert 'dflash' in m.METHODS"
    (recipe / "image.toml").write_text(
        '[base]\nimage = "@images.vllm"\n\n[package]\nname = "vllm"\n\n[output]\ntag = "@images.dflash2"\n\n'
        f'[verify]\ncommand = ["python3", "-c", "{verify}"]\n\n' + "\n".join(entries)
    )
    return recipe / "image.toml"
