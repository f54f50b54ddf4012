"""Doctor fixtures: a throwaway local image built offline (docker import of a tiny tar)."""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import Iterator

import pytest


@pytest.fixture
def scratch_image(docker_client) -> Iterator[str]:
    """A tagged local image with one file; removed afterwards. Never pulls."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"doctor test image\n"
        info = tarfile.TarInfo("README")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    ref = f"vct-doctor-{uuid.uuid4().hex[:10]}:test"
    repo, tag = ref.split(":")
    docker_client.api.import_image_from_data(buf.getvalue(), repository=repo, tag=tag)
    yield ref
    docker_client.images.remove(ref, force=True)
