"""Values that loaded although the server or the gateway would fight them: each refused by
`config` and `render` with exit 2 and one line naming the key and the allowed form."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stack.test_bad_input import refused

NAME_HELP = "a non-empty name without whitespace or control characters that does not start with '-'"


@pytest.mark.parametrize(
    "name", ["a\\nb", "a\\tb", "a b", "a\\u0007b", "a\\u001bb", "a\\u00a0b", "a\\u2028b"]
)
def test_a_served_name_with_whitespace_or_a_control_character_is_refused(tmp_path: Path, name: str) -> None:
    line = refused(tmp_path, extra_toml=f'[stack]\nserved_model_name = "{name}"\n')
    assert "invalid stack.served_model_name" in line and NAME_HELP in line


def test_a_served_name_from_the_environment_is_checked_alike(tmp_path: Path) -> None:
    line = refused(
        tmp_path, env_text="VLLM_API_KEY=sk-regression-test-key-0123456789\nSERVED_MODEL_NAME='a b'\n"
    )
    assert "invalid stack.served_model_name" in line and "SERVED_MODEL_NAME" in line and NAME_HELP in line


@pytest.mark.parametrize("gpus", ['"0,1,1"', "[0, 1, 0]", '"GPU-ab,GPU-ab"'])
def test_a_gpu_named_twice_is_refused(tmp_path: Path, gpus: str) -> None:
    line = refused(tmp_path, extra_toml=f"[stack]\ngpus = {gpus}\n")
    assert "invalid stack.gpus" in line and "each device once" in line


@pytest.mark.parametrize(
    ("args", "flag", "why"),
    [
        ('["--api-key", "sk-secret-in-argv-0123456789"]', "--api-key", "set VLLM_API_KEY"),
        ('["--api-key=sk-secret-in-argv-0123456789"]', "--api-key", "set VLLM_API_KEY"),
        ('["--api_key", "sk-secret-in-argv-0123456789"]', "--api-key", "set VLLM_API_KEY"),
        ('["--port", "8001"]', "--port", "renders --port 8000"),
        ('["--max-num-seqs", "8", "--port=9000"]', "--port", "set stack.port"),
        ('["--host", "127.0.0.1"]', "--host", "stack.bind_address"),
    ],
)
def test_extra_args_may_not_set_what_the_renderer_sets_or_a_secret(
    tmp_path: Path, args: str, flag: str, why: str
) -> None:
    line = refused(tmp_path, extra_toml=f"[variants.mtp]\nextra_args = {args}\n")
    assert f"variants.mtp.extra_args sets {flag}: " in line and why in line
    assert "sk-secret" not in line, "the secret is never shown"


def test_a_flag_is_known_by_its_whole_name_not_a_prefix(tmp_path: Path) -> None:
    from composer.stack.load import load_stack
    from tests.conftest import REPO

    override = tmp_path / "ok.toml"
    override.write_text(
        '[variants.mtp]\nextra_args = ["--max-num-seqs", "8", "--portable-x", "--hostname=a"]\n'
    )
    empty = tmp_path / "empty.env"
    empty.write_text("")
    stack = load_stack([REPO / "composer.toml", override], empty, environ={})
    assert stack.variants["mtp"].extra_args == ("--max-num-seqs", "8", "--portable-x", "--hostname=a")
