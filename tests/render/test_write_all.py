"""`render` writes the set of files all or nothing: when one target cannot be written, the
files already there stay as they were and no temp file is left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from composer.cli import main
from composer.errors import RenderError
from composer.render import files as rf
from tests.conftest import REPO


def _render(env_file: Path, out: Path, *extra: str):
    args = ["--env-file", str(env_file), "--stack", str(REPO / "composer.toml"), *extra]
    return CliRunner().invoke(main, [*args, "render", "--out", str(out)], env={}, catch_exceptions=False)


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        p.name: (p.read_bytes(), p.stat().st_mode & 0o777) for p in sorted(folder.iterdir()) if p.is_file()
    }


@pytest.fixture
def old_set(tmp_path: Path, empty_env_file: Path) -> tuple[Path, dict[str, tuple[bytes, int]]]:
    """A complete rendered set on port 8000, to be replaced by one on port 8001."""
    out = tmp_path / "out"
    assert _render(empty_env_file, out).exit_code == 0
    return out, _snapshot(out)


def test_render_with_a_directory_in_place_of_a_target_writes_nothing(old_set, empty_env_file: Path) -> None:
    out, before = old_set
    (out / "mtp.yml").unlink()
    (out / "mtp.yml").mkdir()
    before.pop("mtp.yml")
    result = _render(empty_env_file, out, "--set", "stack.port=8001")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"compose-spec: error: cannot write {out / 'mtp.yml'}: a directory is in its place "
        "(remove it or use --out)"
    ]
    assert _snapshot(out) == before, "files before the failing one must keep their old bytes"
    assert sorted(p.name for p in out.iterdir()) == sorted([*before, "mtp.yml"]), "no temp file is left"


def test_render_rename_failure_restores_the_files_already_replaced(
    old_set, empty_env_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, before = old_set
    real_replace = os.replace
    calls: list[str] = []

    def replace_failing_on_the_fourth(src, dst) -> None:
        calls.append(str(dst))
        if len(calls) == 4:
            raise PermissionError(1, "Operation not permitted")
        real_replace(src, dst)

    monkeypatch.setattr(rf.os, "replace", replace_failing_on_the_fourth)
    result = _render(empty_env_file, out, "--set", "stack.port=8001")
    assert result.exit_code == 1 and "Operation not permitted; no file was changed" in result.stderr
    assert len(calls) > 4, "the three files already replaced were put back"
    assert _snapshot(out) == before
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_render_with_an_immutable_target_leaves_the_old_set(old_set, empty_env_file: Path) -> None:
    out, before = old_set
    target = out / "dflash2.sh"
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(target)]).returncode:
        pytest.skip("chattr +i needs root and a file system that supports it")
    try:
        result = _render(empty_env_file, out, "--set", "stack.port=8001")
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)
    assert result.exit_code == 1 and "dflash2.sh" in result.stderr and len(result.stderr.splitlines()) == 1
    assert _snapshot(out) == before
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_write_all_reports_what_changed_and_fixes_modes(tmp_path: Path) -> None:
    same = rf.RenderedFile(tmp_path / "same.sh", "echo\n", 0o755)
    new = rf.RenderedFile(tmp_path / "new.yml", "a: 1\n", 0o644)
    same.path.write_text("echo\n")
    same.path.chmod(0o600)
    assert rf.write_all([same, new]) == [False, True]
    assert same.path.stat().st_mode & 0o777 == 0o755 and new.path.read_text() == "a: 1\n"


def test_write_all_refuses_a_directory_before_writing_anything(tmp_path: Path) -> None:
    first = rf.RenderedFile(tmp_path / "a.yml", "a\n", 0o644)
    (tmp_path / "b.yml").mkdir()
    with pytest.raises(RenderError, match="a directory is in its place"):
        rf.write_all([first, rf.RenderedFile(tmp_path / "b.yml", "b\n", 0o644)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.yml"]
