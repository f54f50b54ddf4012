"""Bad input is one line on stderr, exit 2, and nothing written: one test per finding.

Each runs the command line (click's CliRunner) on the unchanged composer.toml plus the
bad value, and checks `config` and `render` alike: the same line, and no output folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from composer.cli import main
from tests.conftest import REPO, shipped_variants

BASE = REPO / "composer.toml"
KEY = "sk-regression-test-key-0123456789"


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def refused(tmp_path: Path, *args: str, env_text: str | None = None, extra_toml: str | None = None) -> str:
    """Run `config` and `render --out` with the bad input; both must exit 2 with one line
    and write nothing. Returns that line."""
    env_file = tmp_path / "bad.env"
    if env_text is not None:
        env_file.write_bytes(env_text.encode("utf-8", "surrogateescape"))
    else:
        env_file.write_text(f"VLLM_API_KEY={KEY}\n")
    stacks = ["--stack", str(BASE)]
    if extra_toml is not None:
        override = tmp_path / "bad.toml"
        override.write_text(extra_toml, encoding="utf-8")
        stacks += ["--stack", str(override)]
    out = tmp_path / "out"
    lines = []
    for command in (["config"], ["render", "--out", str(out)]):
        result = run("--env-file", str(env_file), *stacks, *args, *command, env={})
        assert result.exit_code == 2, (command, result.stdout, result.stderr)
        stderr = result.stderr.splitlines()
        assert len(stderr) == 1 and stderr[0].startswith("compose-spec: error: "), result.stderr
        assert "Traceback" not in result.output
        lines.append(stderr[0])
    assert not out.exists(), "a refused render must write nothing"
    assert lines[0] == lines[1]
    return lines[0]


# -- 1. sizes that overflow -----------------------------------------------------------------
def test_huge_kv_cache_size_is_a_config_error(tmp_path: Path) -> None:
    huge = "9" * 400 + "G"
    line = refused(tmp_path, extra_toml=f'[variants.baseline]\nkv_cache_memory = "{huge}"\n')
    assert "variants.baseline.kv_cache_memory" in line and "(from bad.toml)" in line
    assert "at most 8 EiB" in line and len(line) < 400, "the value is shown truncated"
    line = refused(tmp_path, "--set", f"variants.mtp.kv_cache_memory={huge}")
    assert "(from flag --set)" in line


@pytest.mark.parametrize("value", ["9223372036854775808", "99999999999999999999999", "1" * 5000])
def test_huge_integer_setting_is_a_config_error(tmp_path: Path, value: str) -> None:
    line = refused(tmp_path, "--set", f"stack.max_model_len={value}")
    assert "stack.max_model_len" in line and "positive integer" in line and len(line) < 400


@pytest.mark.parametrize("name", ["chat", "long-prompt", "draft", "chat-0"])
def test_a_workload_name_no_part_understands_is_refused(tmp_path: Path, name: str) -> None:
    line = refused(tmp_path, extra_toml=f'[workloads]\n{name} = "mtp"\n')
    assert f"invalid key workloads.{name} (from bad.toml): '{name}' is not a workload class" in line
    assert "e.g. chat-1, medium-4, long-16" in line


# -- 2. workloads that are not variant names -------------------------------------------------
@pytest.mark.parametrize("value", ['["mtp"]', "{ a = 1 }", "3", "true"])
def test_workload_with_a_non_string_value_is_a_config_error(tmp_path: Path, value: str) -> None:
    line = refused(tmp_path, extra_toml=f"[workloads]\nchat-1 = {value}\n")
    assert "invalid workloads.chat-1" in line and "(from bad.toml)" in line
    assert "expected a variant name, one of " + ", ".join(sorted(shipped_variants())) in line


# -- 3. a variant that is not a table ---------------------------------------------------------
@pytest.mark.parametrize("value", ["3", '"mtp"', "[1, 2]"])
def test_variant_that_is_not_a_table_is_a_config_error(tmp_path: Path, value: str) -> None:
    line = refused(tmp_path, extra_toml=f"[variants]\nbogus = {value}\n")
    assert "invalid variants.bogus" in line and "expected a table ([variants.bogus])" in line


# -- 4. files that are not readable text ----------------------------------------------------
def test_stack_path_naming_a_directory_is_a_config_error(tmp_path: Path) -> None:
    line = refused(tmp_path, "--stack", str(tmp_path))
    assert f"stack file '{tmp_path}' is a directory: give a file" in line


def test_env_file_naming_a_directory_is_a_config_error(tmp_path: Path) -> None:
    folder = tmp_path / "env.d"
    folder.mkdir()
    result = run("--env-file", str(folder), "--stack", str(BASE), "config", env={})
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert f"env file '{folder}' is a directory" in result.stderr


def test_stack_file_name_with_a_nul_byte_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "nul.env").write_bytes(b"COMPOSER_STACK=a\x00b\n")
    result = run("--env-file", str(tmp_path / "nul.env"), "config", env={})
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.output
    assert "stack file 'a\\x00b' is not a valid file name" in result.stderr


def test_non_utf8_stack_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "latin1.toml").write_bytes('[stack]\nserved_model_name = "caf\xe9"\n'.encode("latin-1"))
    line = refused(tmp_path, "--stack", str(tmp_path / "latin1.toml"))
    assert "latin1.toml' is not UTF-8 text" in line and "save it as UTF-8" in line


def test_non_utf8_env_file_is_a_config_error(tmp_path: Path) -> None:
    line = refused(tmp_path, env_text=f"VLLM_API_KEY={KEY}\nMODEL_DIR=/m/caf\udce9\n")
    assert "bad.env' is not UTF-8 text" in line


# -- 5. image references Docker refuses ------------------------------------------------------
@pytest.mark.parametrize(
    "image",
    [
        "UPPER CASE:tag with space",
        "vllm/Vllm-openai:v1",
        "vllm-openai:" + "t" * 129,
        "vllm-openai:.tag",
        "vllm-openai:a:b",
        "registry:port/x",
        "-leading",
        "a___b",
        "x@sha256:abc",
    ],
)
def test_image_reference_docker_refuses_is_a_config_error(tmp_path: Path, image: str) -> None:
    line = refused(tmp_path, env_text=f"VLLM_API_KEY={KEY}\nVLLM_IMAGE='{image}'\n")
    assert "invalid images.vllm" in line and "(from bad.env VLLM_IMAGE)" in line
    assert "an image reference like Docker's" in line


@pytest.mark.parametrize(
    "image",
    [
        "vllm-sim:latest",
        "vllm/vllm-openai:v0.33.0",
        "localhost:5000/team/vllm:cu128_2",
        "registry.example.org/a/b__c/d-e.f",
        "vllm@sha256:" + "0" * 64,
        "vllm:tag@sha256:" + "a" * 64,
    ],
)
def test_image_reference_docker_accepts_is_accepted(tmp_path: Path, image: str) -> None:
    env_file = tmp_path / "ok.env"
    env_file.write_text(f"VLLM_IMAGE={image}\n")
    result = run("--env-file", str(env_file), "--stack", str(BASE), "config", "--json", env={})
    assert result.exit_code == 0, result.stderr
    assert image in result.stdout


# -- 7. two mounts on one container path ------------------------------------------------------
def test_two_mounts_on_one_container_path_are_a_config_error(tmp_path: Path) -> None:
    line = refused(tmp_path, "--set", "stack.draft_path=/models/Qwen3.8-27B")
    assert "invalid stack.draft_path = '/models/Qwen3.8-27B' (from flag --set)" in line
    assert "equals stack.model_path (from composer.toml)" in line and "dflash2" in line


def test_equal_paths_are_fine_without_a_draft_variant(tmp_path: Path) -> None:
    plain = tmp_path / "plain.toml"
    plain.write_text(
        '[stack]\nmodel_path = "/models/m"\ndraft_path = "/models/m"\n'
        '[images]\nvllm = "vllm-sim:latest"\n[variants.baseline]\n'
    )
    (tmp_path / "empty.env").write_text("")
    result = run("--env-file", str(tmp_path / "empty.env"), "--stack", str(plain), "config", env={})
    assert result.exit_code == 0, result.stderr


# -- 8. env-file lines compose refuses ----------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "line_no", "fragment"),
    [
        ('# key\nVLLM_API_KEY=k\nMODEL_DIR="/m/unterminated\n', 3, "cannot parse"),
        ("VLLM_PORT=8001\n=value\n", 2, "cannot parse '=value'"),
        ("VLLM_PORT=8001\n\nMODEL_DIR\n", 3, "'MODEL_DIR' has no '='"),
        ("MODEL_DIR='/m\n", 1, "cannot parse"),
        ('VLLM_PORT="8001" trailing\n', 1, "cannot parse"),
    ],
)
def test_malformed_env_line_is_refused_with_file_and_line(
    tmp_path: Path, text: str, line_no: int, fragment: str
) -> None:
    line = refused(tmp_path, env_text=text)
    assert f"bad.env:{line_no}: " in line and fragment in line
    assert "NAME=value lines" in line or "expected MODEL_DIR=value" in line


# -- 9. an API key an HTTP header cannot carry ----------------------------------------------
@pytest.mark.parametrize("key", ["sk-schlüssel-0123456789abcdef", "sk-key with space-0123456", "sk-tab\tkey"])
def test_non_header_safe_api_key_is_a_config_error(tmp_path: Path, key: str) -> None:
    line = refused(tmp_path, env_text=f"VLLM_API_KEY='{key}'\n")
    assert "invalid VLLM_API_KEY (from bad.env VLLM_API_KEY)" in line and "printable ASCII" in line
    assert key not in line and "schl" not in line, "the key is never shown"
    result = run("--env-file", str(tmp_path / "bad.env"), "--stack", str(BASE), "config", env={})
    assert key not in result.output


# -- 26. K beyond what vLLM accepts ---------------------------------------------------------
@pytest.mark.parametrize("k", ["1000000000", "129", "0"])
def test_k_beyond_vllm_bound_is_a_config_error(tmp_path: Path, k: str) -> None:
    line = refused(tmp_path, "--set", f"variants.mtp.speculative.num_speculative_tokens={k}")
    assert "variants.mtp.speculative.num_speculative_tokens" in line
    assert "a positive integer up to 128" in line


def test_k_at_vllm_bound_is_accepted(tmp_path: Path) -> None:
    env_file = tmp_path / "k.env"
    env_file.write_text("NUM_SPECULATIVE_TOKENS=128\n")
    result = run("--env-file", str(env_file), "--stack", str(BASE), "config", "mtp", env={})
    assert result.exit_code == 0, result.stderr


# -- 27. container paths and durations Docker or compose refuse -----------------------------------
@pytest.mark.parametrize(
    "path",
    ["/", "models/m", "/models/../etc", "/models/./m", "/models//m", "/models/m/", "//m", "/m:ro", "/m\nx"],
)
def test_container_path_docker_refuses_is_a_config_error(tmp_path: Path, path: str) -> None:
    line = refused(tmp_path, extra_toml=f"[stack]\nmodel_path = {path!r}\n".replace("'", '"'))
    assert "invalid stack.model_path" in line and "not '/', no '.' or '..' components" in line


@pytest.mark.parametrize("value", ["9223372037", "99999999999999999999", "153722868m", "2562048h"])
def test_huge_start_period_is_a_config_error(tmp_path: Path, value: str) -> None:
    line = refused(tmp_path, "--set", f"stack.start_period={value}")
    assert "stack.start_period" in line and "at most 9223372036s" in line


def test_host_path_compose_cannot_hold_is_a_config_error(tmp_path: Path) -> None:
    line = refused(tmp_path, env_text=f"VLLM_API_KEY={KEY}\nMODEL_DIR='/models/{{m}}'\n")
    assert "invalid stack.model_dir = '/models/{m}' (from bad.env MODEL_DIR)" in line


@pytest.mark.parametrize(
    "name", ["chat-1", "long16000-16", "chatas-given-1", "chat", "chat-0", "long-123456", "x-1"]
)
def test_the_schema_pattern_and_the_loader_agree_on_workload_names(name: str) -> None:
    import re

    from composer.stack.workload_classes import WORKLOAD_PATTERN, class_shape

    assert (re.fullmatch(WORKLOAD_PATTERN.strip("^$"), name) is not None) == (class_shape(name) is not None)


# -- a variant name the gateway would refuse --------------------------------------------------
@pytest.mark.parametrize(("length", "ok"), [(64, True), (65, False), (200, False)])
def test_a_variant_name_longer_than_the_gateways_limit_is_refused_at_load(
    tmp_path: Path, length: int, ok: bool
) -> None:
    name = "m" * length
    toml = f'[variants.{name}]\nextends = "mtp"\n'
    if ok:
        override = tmp_path / "ok.toml"
        override.write_text(toml, encoding="utf-8")
        env_file = tmp_path / "ok.env"
        env_file.write_text(f"VLLM_API_KEY={KEY}\n")
        result = run(
            "--env-file", str(env_file), "--stack", str(BASE), "--stack", str(override), "config", env={}
        )
        assert result.exit_code == 0, result.stderr
        return
    line = refused(tmp_path, extra_toml=toml)
    assert f"invalid variant name '{name[:40]}" in line and f"({length} characters)" in line
    assert "at most 64 characters (the gateway refuses longer names)" in line and len(line) < 400
