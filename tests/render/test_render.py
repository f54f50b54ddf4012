"""Rendering: golden files, atomic and minimal writes, --check, and nothing written on errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from composer.cli import main
from composer.errors import RenderError
from composer.render.files import render_all, yaml_quote
from composer.stack.model import Stack
from tests.conftest import shipped_variants

from .conftest import REPO

VARIANTS = shipped_variants()


def _render(env_file: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["--env-file", str(env_file), *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _snapshot(directory: Path) -> dict[str, tuple[bytes, int, int]]:
    return {
        p.name: (p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(directory.iterdir())
    }


def test_defaults_reproduce_the_committed_files(default_stack: Stack) -> None:
    files = render_all(default_stack, [], REPO / "compose")
    assert sorted(f.path.name for f in files) == sorted(f"{v}.{e}" for v in VARIANTS for e in ("yml", "sh"))
    for file in files:
        assert file.content.encode() == file.path.read_bytes(), f"{file.path} differs from a default render"


def test_cli_check_passes_on_the_committed_files(empty_env_file: Path) -> None:
    code, out, _ = _render(empty_env_file, "render", "--check")
    assert code == 0, out
    assert f"{2 * len(VARIANTS)} rendered file(s) are current" in out


def test_render_writes_modes_and_skips_unchanged_files(tmp_path: Path, empty_env_file: Path) -> None:
    out = tmp_path / "out"
    code, stdout, _ = _render(empty_env_file, "render", "--out", str(out))
    assert code == 0 and stdout.count("wrote: ") == 2 * len(VARIANTS)
    assert (out / "mtp.sh").stat().st_mode & 0o777 == 0o755
    assert (out / "mtp.yml").stat().st_mode & 0o777 == 0o644
    before = _snapshot(out)
    code, stdout, _ = _render(empty_env_file, "render", "--out", str(out))
    assert code == 0 and stdout.count("unchanged: ") == 2 * len(VARIANTS)
    assert _snapshot(out) == before


def test_only_changed_files_are_replaced_atomically(tmp_path: Path, empty_env_file: Path) -> None:
    out = tmp_path / "out"
    _render(empty_env_file, "render", "--out", str(out))
    before = _snapshot(out)
    code, stdout, _ = _render(
        empty_env_file, "--set", "variants.dflash2.kv_cache_memory=4G", "render", "--out", str(out)
    )
    assert code == 0
    after = _snapshot(out)
    changed = {name for name in after if after[name] != before[name]}
    assert changed == {"dflash2.yml", "dflash2.sh"}  # a --set names one variant, not those extending it
    assert all(after[n][1] != before[n][1] for n in changed), (
        "a changed file is replaced by rename (new inode)"
    )
    assert sorted(os.listdir(out)) == sorted(before), "no temporary files are left behind"
    assert "wrote: " in stdout and stdout.count("unchanged: ") == 2 * (len(VARIANTS) - 1)


def test_check_lists_stale_files_and_writes_nothing(tmp_path: Path, empty_env_file: Path) -> None:
    out = tmp_path / "out"
    _render(empty_env_file, "render", "--out", str(out))
    (out / "mtp.yml").write_text("edited by hand\n")
    (out / "baseline.sh").unlink()
    before = _snapshot(out)
    code, stdout, stderr = _render(empty_env_file, "render", "--check", "--out", str(out))
    assert code == 1
    assert f"stale: {out / 'mtp.yml'}" in stdout and f"stale: {out / 'baseline.sh'}" in stdout
    assert stdout.count("stale: ") == 2
    assert stderr.strip().count("\n") == 0 and "2 rendered file(s) are stale" in stderr
    assert _snapshot(out) == before


def test_a_bad_value_leaves_existing_files_untouched(tmp_path: Path, empty_env_file: Path) -> None:
    out = tmp_path / "out"
    _render(empty_env_file, "render", "--out", str(out))
    before = _snapshot(out)
    code, stdout, stderr = _render(empty_env_file, "--set", "port=70000", "render", "--out", str(out))
    assert code == 2 and stdout == ""
    assert stderr == (
        "compose-spec: error: invalid stack.port = '70000' (from flag --set): "
        "expected a port number from 1 to 65535\n"
    )
    assert _snapshot(out) == before


def test_an_unholdable_default_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env_file = tmp_path / "odd.env"
    env_file.write_text("DRAFT_DIR='/models/{draft}'\n")
    code, stdout, stderr = _render(env_file, "render", "--out", str(out))
    assert code == 2 and stdout == ""
    assert stderr.count("\n") == 1
    assert "invalid stack.draft_dir = '/models/{draft}' (from odd.env DRAFT_DIR)" in stderr
    assert "without '}'" in stderr
    assert not out.exists(), "the baseline files were rendered fine but must not be written either"


@pytest.mark.parametrize("value", ["/a}b", "/a\nb"])
def test_render_error_names_the_variable(default_stack: Stack, tmp_path: Path, value: str) -> None:
    from dataclasses import replace

    with pytest.raises(RenderError, match="MODEL_DIR default"):
        render_all(replace(default_stack, model_dir=value), ["baseline"], tmp_path)


def test_unknown_variant_is_a_usage_error(empty_env_file: Path, tmp_path: Path) -> None:
    code, _, stderr = _render(empty_env_file, "render", "nope", "--out", str(tmp_path / "o"))
    assert code == 2 and "unknown variant 'nope': choose one of " + ", ".join(sorted(VARIANTS)) in stderr
    assert not (tmp_path / "o").exists()


def test_selected_variants_only(tmp_path: Path, empty_env_file: Path) -> None:
    code, _, _ = _render(empty_env_file, "render", "mtp", "--out", str(tmp_path))
    assert code == 0 and sorted(os.listdir(tmp_path)) == ["empty.env", "mtp.sh", "mtp.yml"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", '"plain"'),
        ('q"b\\', '"q\\"b\\\\"'),
        ("é", '"\\xe9"'),
        ("\u2028", '"\\u2028"'),
        ("😀", '"\\U0001f600"'),
    ],
)
def test_yaml_quote_is_ascii_without_surrogate_pairs(value: str, expected: str) -> None:
    assert yaml_quote(value) == expected


def test_a_lost_executable_bit_is_restored_without_rewriting(tmp_path: Path, empty_env_file: Path) -> None:
    out = tmp_path / "out"
    _render(empty_env_file, "render", "mtp", "--out", str(out))
    launcher = out / "mtp.sh"
    launcher.chmod(0o644)
    inode, mtime = launcher.stat().st_ino, launcher.stat().st_mtime_ns
    code, stdout, _ = _render(empty_env_file, "render", "mtp", "--out", str(out))
    assert code == 0 and f"unchanged: {launcher}" in stdout
    assert launcher.stat().st_mode & 0o777 == 0o755
    assert (launcher.stat().st_ino, launcher.stat().st_mtime_ns) == (inode, mtime)
