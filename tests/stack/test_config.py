"""Precedence (flags > environment > .env > composer.toml files > defaults) and validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer.errors import ConfigError
from composer.stack.load import load_stack
from tests.conftest import REPO

BASE = REPO / "composer.toml"


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


LAYERS = ("toml", "toml2", "dotenv", "environ", "flag")


@pytest.mark.parametrize("top", range(len(LAYERS) + 1))
def test_each_layer_overrides_the_ones_below(tmp_path: Path, top: int) -> None:
    """Layers 0..top-1 are set; the highest set one wins and is reported as the source."""
    active = LAYERS[:top]
    minimal = '[images]\nvllm = "img"\n[variants.baseline]\n'
    files = [_write(tmp_path / "a.toml", minimal + ("[stack]\nport = 8001\n" if "toml" in active else ""))]
    if "toml2" in active:
        files.append(_write(tmp_path / "b.toml", "[stack]\nport = 8002\n"))
    env_file = _write(tmp_path / "x.env", "VLLM_PORT=8003\n" if "dotenv" in active else "")
    environ = {"VLLM_PORT": "8004"} if "environ" in active else {}
    flags = ["port=8005"] if "flag" in active else []
    stack = load_stack(files, env_file, environ=environ, flags=flags)
    expected = {
        0: (8000, "default"),
        1: (8001, "a.toml"),
        2: (8002, "b.toml"),
        3: (8003, "x.env VLLM_PORT"),
        4: (8004, "environment VLLM_PORT"),
        5: (8005, "flag --set"),
    }[top]
    assert (stack.port, stack.sources["stack.port"]) == expected


def test_variant_values_follow_the_same_chain(tmp_path: Path, empty_env_file: Path) -> None:
    key = "variants.dflash2.kv_cache_memory"
    assert load_stack([BASE], empty_env_file, environ={}).variants["dflash2"].kv_cache_memory == 4831838208
    env_file = _write(tmp_path / "k.env", "KV_CACHE_MEMORY=4G\nNUM_SPECULATIVE_TOKENS=3\n")
    stack = load_stack([BASE], env_file, environ={})
    assert stack.variants["dflash2"].kv_cache_memory == 4 << 30
    assert stack.variants["mtp"].speculative.num_speculative_tokens == 3  # type: ignore[union-attr]
    assert stack.sources[key] == "k.env KV_CACHE_MEMORY"
    stack = load_stack([BASE], env_file, environ={"KV_CACHE_MEMORY": "5368709120"})
    assert (stack.variants["dflash2"].kv_cache_memory, stack.sources[key]) == (
        5 << 30,
        "environment KV_CACHE_MEMORY",
    )
    stack = load_stack([BASE], env_file, environ={"KV_CACHE_MEMORY": "5G"}, flags=[f"{key}=6GiB"])
    assert (stack.variants["dflash2"].kv_cache_memory, stack.sources[key]) == (6 << 30, "flag --set")
    assert stack.variants["baseline"].kv_cache_memory == 5 << 30


def test_images_come_from_image_variables(tmp_path: Path) -> None:
    env_file = _write(tmp_path / "i.env", "DFLASH2_IMAGE=from-dotenv:1\n")
    stack = load_stack([BASE], env_file, environ={"VLLM_IMAGE": "from-env:2"})
    assert stack.images == {"vllm": "from-env:2", "dflash2": "from-dotenv:1"}
    assert stack.sources["images.vllm"] == "environment VLLM_IMAGE"


def test_empty_values_count_as_unset(tmp_path: Path) -> None:
    env_file = _write(tmp_path / "e.env", "VLLM_PORT=\nMODEL_DIR=\n")
    stack = load_stack([BASE], env_file, environ={"VLLM_PORT": "", "GPU_DEVICES": ""})
    assert stack.port == 8000 and stack.gpus == ("0", "1", "2", "3")
    assert stack.sources["stack.port"] == "composer.toml"


def test_relative_paths_resolve_against_the_file_that_sets_them(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    env_file = _write(tmp_path / "conf" / "d.env", "MODEL_DIR=models/m\n")
    override = _write(tmp_path / "o.toml", '[stack]\ndraft_dir = "drafts/d"\n')
    stack = load_stack([BASE, override], env_file, environ={})
    assert stack.model_dir == str(tmp_path / "conf" / "models" / "m")
    assert stack.draft_dir == str(tmp_path / "drafts" / "d")


def test_composer_stack_variable_lists_stack_files(tmp_path: Path, empty_env_file: Path) -> None:
    override = _write(tmp_path / "o.toml", "[stack]\nport = 9001\n")
    stack = load_stack(None, empty_env_file, environ={"COMPOSER_STACK": f"{BASE}:{override}"})
    assert stack.port == 9001 and stack.sources["stack.port"] == "o.toml"


def test_inherited_value_reports_the_file_that_set_it(tmp_path: Path, empty_env_file: Path) -> None:
    override = _write(tmp_path / "late.toml", '[variants.baseline]\nkv_cache_memory = "6G"\n')
    stack = load_stack([BASE, override], empty_env_file, environ={})
    assert stack.variants["mtp"].kv_cache_memory == 6 << 30
    assert stack.sources["variants.mtp.kv_cache_memory"] == "late.toml"
    assert stack.sources["variants.dflash2.kv_cache_memory"] == "composer.toml"


def test_default_env_file_is_optional_but_a_named_one_is_not(tmp_path: Path) -> None:
    assert load_stack([BASE], ".env" if not Path(".env").exists() else None, environ={}).port == 8000
    with pytest.raises(ConfigError, match="does not exist"):
        load_stack([BASE], tmp_path / "missing.env", environ={})


@pytest.mark.parametrize(
    ("flag", "key", "allowed"),
    [
        ("port=0", "stack.port", "1 to 65535"),
        ("port=http", "stack.port", "1 to 65535"),
        (
            "variants.mtp.speculative.num_speculative_tokens=seven",
            "num_speculative_tokens",
            "positive integer",
        ),
        ("variants.mtp.speculative.num_speculative_tokens=0", "num_speculative_tokens", "positive integer"),
        ("variants.mtp.speculative.method=medusa", "speculative.method", "ngram"),
        ("gpus=zero", "stack.gpus", "'none'"),
        ("variants.baseline.kv_cache_memory=lots", "kv_cache_memory", "4.5GiB"),
        ("bind_address=localhost", "stack.bind_address", "IP address"),
        ("attention_backend=fa3", "stack.attention_backend", "flash_attn"),
        ("served_model_name=", "stack.served_model_name", "non-empty"),
        ("served_model_name=--x", "stack.served_model_name", "start with '-'"),
        ("model_path=models/x", "stack.model_path", "absolute path"),
    ],
)
def test_invalid_value_names_key_value_and_allowed(
    empty_env_file: Path, flag: str, key: str, allowed: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_stack([BASE], empty_env_file, environ={}, flags=[flag])
    message = str(err.value)
    assert "\n" not in message
    assert key in message and allowed in message
    assert repr(flag.partition("=")[2]) in message
    assert err.value.exit_code == 2


@pytest.mark.parametrize(
    ("toml", "fragment"),
    [
        ("[stack]\napi_key = 'x'\n", "secrets never go in composer.toml"),
        ("[stack]\nportt = 1\n", "unknown key stack.portt"),
        ("[images]\n'1x' = 'a'\n", "invalid image name images.1x"),
        ("[images]\na-b = 'a'\na_b = 'b'\n", "share the variable A_B_IMAGE"),
        ("[variants.mtp]\nextends = 'mtp'\n", "forms a cycle"),
        ("[variants.mtp]\nextends = 'nope'\n", "choose one of"),
        ("[variants.mtp.speculative.extra]\nnum_speculative_tokens = 3\n", "set it as"),
        ("[variants.dflash2.speculative.extra]\nmodel = '/x'\n", "extra.model"),
        ("[variants.mtp.speculative.extra]\nwhen = 1979-05-27\n", "expected JSON values"),
        ("[variants.mtp.env]\n'1BAD' = 'x'\n", "invalid variants.mtp.env name"),
        ("[variants.mtp.env]\nVLLM_API_KEY = 'x'\n", "secrets never go"),
        ('[variants.mtp]\nextra_args = ["a\\u0000b"]\n', "without NUL"),
        ("[workloads]\nchat-1 = 'nope'\n", "invalid workloads.chat-1"),
        ("[workloads]\nchat = 'mtp'\n", "invalid key workloads.chat"),
        ("[nope]\n", "unknown table"),
    ],
)
def test_structural_errors(tmp_path: Path, empty_env_file: Path, toml: str, fragment: str) -> None:
    override = _write(tmp_path / "bad.toml", toml)
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.").replace("(", r"\(")):
        load_stack([BASE, override], empty_env_file, environ={})


@pytest.mark.parametrize("flag", ["stack.nope=1", "variants.baseline.speculative.method=mtp", "noequals"])
def test_unknown_or_malformed_set_is_refused(empty_env_file: Path, flag: str) -> None:
    with pytest.raises(ConfigError, match="--set"):
        load_stack([BASE], empty_env_file, environ={}, flags=[flag])


def test_api_key_is_read_but_kept_out_of_repr(tmp_path: Path) -> None:
    env_file = _write(tmp_path / "k.env", "VLLM_API_KEY=sk-dotenv-secret\n")
    stack = load_stack([BASE], env_file, environ={})
    assert stack.api_key == "sk-dotenv-secret" and stack.sources["VLLM_API_KEY"] == "k.env VLLM_API_KEY"
    assert "sk-dotenv-secret" not in repr(stack)
    stack = load_stack([BASE], env_file, environ={"VLLM_API_KEY": "sk-env-secret"})
    assert stack.api_key == "sk-env-secret" and stack.sources["VLLM_API_KEY"] == "environment VLLM_API_KEY"


@pytest.mark.parametrize("line", ["MODEL_DIR=$HOME/m", 'MODEL_DIR="/m/${X}"', "VLLM_API_KEY=sk-$ecret"])
def test_dotenv_values_compose_would_expand_are_refused(tmp_path: Path, line: str) -> None:
    env_file = _write(tmp_path / "d.env", f"# note\n{line}\n")
    with pytest.raises(ConfigError, match=r"d\.env:2: .* contains '\$'.*single-quote") as err:
        load_stack([BASE], env_file, environ={})
    assert "ecret" not in str(err.value)


def test_single_quoted_dollar_is_literal(tmp_path: Path) -> None:
    env_file = _write(tmp_path / "d.env", "MODEL_DIR='/m/$x'\nVLLM_API_KEY='sk-$ecret'\n")
    stack = load_stack([BASE], env_file, environ={})
    assert stack.model_dir == "/m/$x" and stack.api_key == "sk-$ecret"
