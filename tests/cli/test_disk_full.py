"""A full disk, a quota or a read-only file system while writing state: one line naming the
folder and what frees it, exit 1; never "internal error"."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from composer.errors import RenderError
from composer.render.files import RenderedFile, write_atomic
from tests.cli.conftest import invoke

REASONS = [(errno.ENOSPC, "No space left on device"), (errno.EDQUOT, "Disk quota exceeded")]


class _FullDisk:
    """A file object whose writes fail as on a full disk."""

    def __init__(self, fd: int, code: int, reason: str) -> None:
        self.fd, self.code, self.reason = fd, code, reason

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def write(self, data: bytes) -> int:
        raise OSError(self.code, self.reason)


@pytest.mark.parametrize(("code", "reason"), REASONS)
def test_a_run_file_on_a_full_disk_names_its_folder_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, reason: str
) -> None:
    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: _FullDisk(fd, code, reason))
    target = tmp_path / "state" / "proj" / "mtp-abc.yml"
    with pytest.raises(RenderError) as failed:
        write_atomic(RenderedFile(target, "services: {}\n", 0o600))
    monkeypatch.undo()
    assert str(failed.value) == (
        f"cannot write in {target.parent}: {reason}: free some space there, then run the command again"
    )
    assert list(target.parent.iterdir()) == [], "no temp file left behind"


def test_a_full_disk_anywhere_is_one_line_naming_the_folder_not_an_internal_error(
    monkeypatch: pytest.MonkeyPatch, empty_env_file: Path
) -> None:
    def full(*_: object, **__: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "/state/vllm-composer/proj/history.jsonl")

    monkeypatch.setattr("composer.swap.journal.read_history", full)
    result = invoke("--env-file", str(empty_env_file), "history")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "compose-spec: error: cannot write in /state/vllm-composer/proj: No space left on device: "
        "free some space there, then run the command again"
    ]


def test_a_read_only_file_system_says_to_make_it_writable(
    monkeypatch: pytest.MonkeyPatch, empty_env_file: Path
) -> None:
    def read_only(*_: object, **__: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system", "/ro/proj/swap.json")

    monkeypatch.setattr("composer.swap.journal.read_history", read_only)
    result = invoke("--env-file", str(empty_env_file), "history")
    assert result.exit_code == 1
    assert "cannot write in /ro/proj: Read-only file system: make it writable" in result.stderr
    assert "internal error" not in result.stderr
