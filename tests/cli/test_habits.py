"""Habits compose users bring: a bare command shows its help, a missing model folder is refused
at once, a stack file's typo gets the close match `--set` gets."""

from __future__ import annotations

from pathlib import Path

from .conftest import REPO, invoke


def test_bare_command_prints_the_help_and_exits_0() -> None:
    result = invoke()
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Usage: compose-spec") and "Commands:" in result.stdout


def test_init_refuses_a_model_folder_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    result = invoke("init", str(tmp_path / "s"), "--model-dir", str(missing))
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and f"--model-dir {missing}: no such folder" in result.stderr
    assert not (tmp_path / "s").exists()  # nothing written


def test_a_typo_in_the_stack_file_gets_the_close_match(tmp_path: Path, empty_env_file: Path) -> None:
    stack = tmp_path / "typo.toml"
    stack.write_text("[stack]\nprot = 8001\n")
    args = ["--env-file", str(empty_env_file), "-f", str(REPO / "composer.toml"), "-f", str(stack), "config"]
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr == "compose-spec: error: unknown key stack.prot: did you mean 'stack.port'?\n"
    stack.write_text("[variants.mtp]\nkv_cache_memroy = '7GiB'\n")
    result = invoke(*args)
    assert result.exit_code == 2 and "did you mean 'variants.mtp.kv_cache_memory'?" in result.stderr


def test_config_prints_sizes_in_the_units_the_stack_reads(empty_env_file: Path) -> None:
    result = invoke("--env-file", str(empty_env_file), "config")
    assert result.exit_code == 0, result.output
    line = next(row for row in result.stdout.splitlines() if row.startswith("kubernetes.shm_size "))
    assert line.split()[1] == "8.0GiB"


def test_every_shown_size_reads_back_as_the_same_bytes() -> None:
    from composer.render.describe import shown_value
    from composer.stack.values import parse_size

    for size in (1, 1023, 1024, 1536, 8 * 2**30, 4831838208, 4831838209, 3 * 2**40 + 2**39, 10**9):
        assert parse_size(shown_value(size, "size")) == size
