"""Doctor fixtures: throwaway local images built offline (docker import of a tiny tar)."""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from collections.abc import Callable, Iterator, Mapping

import pytest


def _tiny_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"doctor test image\n"
        info = tarfile.TarInfo("README")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def make_image(docker_client) -> Iterator[Callable[[Mapping[str, str]], str]]:
    """Build tagged local images with the given labels; all removed afterwards. Never pulls."""
    made: list[str] = []

    def build(labels: Mapping[str, str]) -> str:
        repo, tag = f"vct-doctor-{uuid.uuid4().hex[:10]}", "test"
        changes = [f"LABEL {json.dumps(k)}={json.dumps(v)}" for k, v in labels.items()]
        docker_client.api.import_image_from_data(_tiny_tar(), repository=repo, tag=tag, changes=changes)
        made.append(f"{repo}:{tag}")
        return made[-1]

    yield build
    for ref in made:
        docker_client.images.remove(ref, force=True)


@pytest.fixture
def scratch_image(make_image) -> str:
    """One tagged local image without labels."""
    return make_image({})
