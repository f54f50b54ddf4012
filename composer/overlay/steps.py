"""Docker steps of an overlay build: inspect, run offline, read files, build, tag, remove.

Every container runs with networking disabled and is removed afterwards; images are
never pulled. The caller passes one Docker SDK client in.
"""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from composer.errors import ImageBuildError

Progress = Callable[[str], None]
RUN_TIMEOUT = 300
OVERLAY_DIR = "overlay"


def local_image(client: Any, ref: str) -> Any | None:
    """The local image `ref` (a tag or an id), or None; never pulls."""
    try:
        return client.images.get(ref)
    except ImageNotFound:
        return None
    except (APIError, DockerException) as err:
        raise ImageBuildError(f"cannot inspect image {ref!r}: {err}") from err


def run_offline(client: Any, image: str, argv: Iterable[str], labels: Mapping[str, str]) -> tuple[int, str]:
    """Run `argv` (as the entrypoint) in a new container of `image` without networking."""
    container = client.containers.create(
        image, entrypoint=list(argv), network_mode="none", labels=dict(labels), detach=True
    )
    try:
        container.start()
        try:
            status = container.wait(timeout=RUN_TIMEOUT)
        except Exception as err:  # requests' ReadTimeout and friends
            raise ImageBuildError(
                f"{' '.join(argv)!r} did not finish within {RUN_TIMEOUT}s in {image}"
            ) from err
        output = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        return int(status.get("StatusCode", 1)), output
    finally:
        _remove_container(container)


def read_files(
    client: Any, image: str, root: str, paths: Iterable[str], labels: Mapping[str, str]
) -> dict[str, str | None]:
    """Text of `root/path` for each path in a created (never started) container; None if absent."""
    container = client.containers.create(
        image, entrypoint=["/nonexistent"], network_mode="none", labels=dict(labels)
    )
    try:
        return {path: _read_one(container, f"{root.rstrip('/')}/{path}") for path in paths}
    finally:
        _remove_container(container)


def build_image(
    client: Any,
    base_id: str,
    package_parent: str,
    files: Mapping[str, str],
    labels: Mapping[str, str],
    progress: Progress,
    no_cache: bool = False,
) -> str:
    """Build `FROM base_id` + one COPY of `files` into `package_parent`; return the new image id."""
    context = build_context(base_id, package_parent, files, labels)
    image_id = ""
    try:
        stream = client.api.build(
            fileobj=context,
            custom_context=True,
            network_mode="none",
            pull=False,
            rm=True,
            forcerm=True,
            nocache=no_cache,
            decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                raise ImageBuildError(f"docker build failed: {str(chunk['error']).strip()}")
            text = str(chunk.get("stream", "")).strip()
            if text:
                progress(text)
            image_id = chunk.get("aux", {}).get("ID", image_id)
    except (APIError, DockerException) as err:
        raise ImageBuildError(f"docker build failed: {err}") from err
    if not image_id:
        raise ImageBuildError("docker build finished without reporting an image id")
    return image_id


def tag_image(client: Any, image_id: str, ref: str) -> None:
    """Point `ref` (repo:tag) at `image_id`."""
    repo, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
    client.images.get(image_id).tag(repo, tag or "latest")


def remove_image(client: Any, image_id: str) -> None:
    """Remove an image, ignoring one that is already gone."""
    with contextlib.suppress(NotFound):
        client.images.remove(image_id, force=True, noprune=False)


def drop_if_untagged(client: Any, image_id: str) -> bool:
    """Remove an image that no tag points at any more (kept while a container uses it)."""
    image = local_image(client, image_id)
    if image is None or image.tags:
        return False
    try:
        client.images.remove(image_id, noprune=False)
    except (APIError, DockerException):
        return False
    return True


def _read_one(container: Any, path: str) -> str | None:
    try:
        stream, _stat = container.get_archive(path)
    except NotFound:
        return None
    data = b"".join(stream)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        member = archive.next()
        if member is None or not member.isfile():
            kind = "a symlink" if member is not None and member.issym() else "not a regular file"
            raise ImageBuildError(f"{path} in the base image is {kind}; the overlay only replaces files")
        handle = archive.extractfile(member)
        raw = handle.read() if handle else b""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ImageBuildError(f"{path} in the base image is not UTF-8 text") from err


def dockerfile_text(
    base_id: str, package_parent: str, labels: Mapping[str, str], copy_files: bool = True
) -> str:
    """`FROM base` + one COPY of the overlay tree (none without files) + one LABEL instruction."""
    copy = json.dumps([f"{OVERLAY_DIR}/", package_parent.rstrip("/") + "/"])
    label_args = " ".join(f"{json.dumps(k)}={json.dumps(v)}" for k, v in sorted(labels.items()))
    return (
        f"FROM {base_id}\n"
        + (f"COPY {copy}\n" if copy_files else "")
        + (f"LABEL {label_args}\n" if labels else "")
    )


def build_context(
    base_id: str, package_parent: str, files: Mapping[str, str], labels: Mapping[str, str]
) -> io.BytesIO:
    """An in-memory tar: the Dockerfile and `overlay/<path>` for each patched file."""
    dockerfile = dockerfile_text(base_id, package_parent, labels, copy_files=bool(files)).encode()
    buffer = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        _add(archive, "Dockerfile", dockerfile, now)
        dirs: set[str] = set()
        for path, text in sorted(files.items()):
            for parent in reversed(PurePosixPath(path).parents[:-1]):
                if str(parent) not in dirs:
                    dirs.add(str(parent))
                    info = tarfile.TarInfo(f"{OVERLAY_DIR}/{parent}")
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, now
                    archive.addfile(info)
            _add(archive, f"{OVERLAY_DIR}/{path}", text.encode("utf-8"), now)
    buffer.seek(0)
    return buffer


def _add(archive: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, mtime
    archive.addfile(info, io.BytesIO(data))


def _remove_container(container: Any) -> None:
    with contextlib.suppress(NotFound):
        container.remove(force=True)
