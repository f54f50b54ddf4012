"""The generated build context holds the Dockerfile and the patched files, nothing else."""

from __future__ import annotations

import tarfile

from composer.overlay.steps import build_context, dockerfile_text


def test_dockerfile_is_from_base_one_copy_one_label() -> None:
    text = dockerfile_text("sha256:abc", "/usr/lib/python3/dist-packages", {"b": "2", "a": 'x "y"'})
    assert text.splitlines() == [
        "FROM sha256:abc",
        'COPY ["overlay/", "/usr/lib/python3/dist-packages/"]',
        'LABEL "a"="x \\"y\\"" "b"="2"',
    ]


def test_context_contains_only_patched_files() -> None:
    files = {"vllm/config/methods.py": "A = 1\n", "vllm/spec/dflash.py": "B = 2\n"}
    with tarfile.open(fileobj=build_context("sha256:abc", "/site", files, {})) as archive:
        members = {m.name: m for m in archive.getmembers()}
        assert sorted(n for n, m in members.items() if m.isfile()) == [
            "Dockerfile",
            "overlay/vllm/config/methods.py",
            "overlay/vllm/spec/dflash.py",
        ]
        assert all(m.mode == 0o644 for m in members.values() if m.isfile())
        handle = archive.extractfile("overlay/vllm/spec/dflash.py")
        assert handle is not None and handle.read() == b"B = 2\n"
