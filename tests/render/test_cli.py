"""The command line: exit codes (2 usage/config, 1 failure), one-line errors, `config`
sources, and the API key never printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from composer.cli import main
from tests.conftest import shipped_variants

from .conftest import REPO

SECRET = "sk-very-secret-0123456789"


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def assert_one_line_error(result: Result, code: int, fragment: str) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("compose-spec: error: "), result.stderr
    assert fragment in lines[0]


def test_help_and_version() -> None:
    assert run("--help").exit_code == 0
    assert "render" in run("--help").stdout and "config" in run("--help").stdout
    assert run("--version").exit_code == 0


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--set", "port=0", "config"], "invalid stack.port = '0'"),
        (["--set", "nokey", "config"], "expected KEY=VALUE"),
        (["--env-file", "/nonexistent/x.env", "config"], "env file '/nonexistent/x.env' does not exist"),
        (["--stack", "/nonexistent.toml", "config"], "stack file '/nonexistent.toml' does not exist"),
        (["config", "nope"], "unknown variant 'nope'"),
        (["--set", "model_dir=/m}", "render", "--check"], "stack.model_dir = '/m}' (from flag --set)"),
        (["render", "nope", "--check"], "unknown variant 'nope'"),
    ],
)
def test_usage_and_config_errors_exit_2(empty_env_file: Path, args: list[str], fragment: str) -> None:
    if args[0] != "--env-file":
        args = ["--env-file", str(empty_env_file), *args]
    assert_one_line_error(run(*args), 2, fragment)


def test_click_usage_errors_exit_2() -> None:
    assert run("render", "--no-such-option").exit_code == 2
    assert run("no-such-command").exit_code == 2


def test_failures_exit_1(tmp_path: Path, empty_env_file: Path) -> None:
    out = tmp_path / "out"
    (out / "mtp.sh").mkdir(parents=True)
    result = run("--env-file", str(empty_env_file), "render", "--out", str(out))
    assert_one_line_error(result, 1, "mtp.sh: a directory is in its place")
    result = run("--env-file", str(empty_env_file), "render", "--check", "--out", str(out))
    assert_one_line_error(result, 1, f"{2 * len(shipped_variants())} rendered file(s) are stale")


def test_config_reports_the_source_of_each_value(tmp_path: Path) -> None:
    env_file = tmp_path / "site.env"
    env_file.write_text(f"VLLM_PORT=8100\nMODEL_DIR=/from/dotenv\nVLLM_API_KEY={SECRET}\n")
    override = tmp_path / "late.toml"
    override.write_text('[stack]\nmax_model_len = 65536\n[variants.baseline]\nkv_cache_memory = "6G"\n')
    result = run(
        "--env-file",
        str(env_file),
        "--stack",
        str(REPO / "composer.toml"),
        "--stack",
        str(override),
        "--set",
        "variants.mtp.speculative.num_speculative_tokens=5",
        "config",
        "--json",
        env={"GPU_DEVICES": "0,1", "SERVED_MODEL_NAME": ""},
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    sources = data["sources"]
    assert sources["stack.port"] == "site.env VLLM_PORT" and data["stack"]["port"] == 8100
    assert sources["stack.gpus"] == "environment GPU_DEVICES" and data["stack"]["gpus"] == "0,1"
    assert sources["stack.max_model_len"] == "late.toml"
    assert sources["variants.mtp.kv_cache_memory"] == "late.toml"
    assert sources["stack.served_model_name"] == "composer.toml", "an empty variable counts as unset"
    assert sources["stack.service"] == "composer.toml"
    assert sources["variants.mtp.speculative.num_speculative_tokens"] == "flag --set"
    assert data["variants"]["mtp"]["speculative"]["num_speculative_tokens"] == 5
    assert sources["variants.mtp.speculative.draft_model"] == "default"
    assert sources["VLLM_API_KEY"] == "site.env VLLM_API_KEY" and data["api_key"] == "********"


def test_config_text_has_a_source_column(empty_env_file: Path) -> None:
    result = run("--env-file", str(empty_env_file), "--set", "port=8001", "config", "mtp")
    assert result.exit_code == 0
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()}
    assert rows["stack.port"][1:4] == ["8001", "flag", "--set"]
    assert rows["stack.project"][2] == "composer.toml"
    assert "variants.dflash2.image" not in rows and rows["VLLM_API_KEY"][1:3] == ["(not", "set)"]


@pytest.mark.parametrize("where", ["dotenv", "environment"])
def test_the_api_key_never_appears(tmp_path: Path, where: str) -> None:
    env_file = tmp_path / "k.env"
    env_file.write_text(f"VLLM_API_KEY={SECRET}\n" if where == "dotenv" else "")
    env = {"VLLM_API_KEY": SECRET} if where == "environment" else None
    out = tmp_path / "out"
    outputs = []
    for args in (["config"], ["config", "--json"], ["config", "dflash2"], ["render", "--out", str(out)]):
        result = run("--env-file", str(env_file), *args, env=env)
        assert result.exit_code == 0, result.stderr
        outputs.append(result.output)
    assert "********" in outputs[0] and "********" in outputs[1]
    assert all(SECRET not in text for text in outputs)
    assert all(SECRET not in path.read_text() for path in out.iterdir())


_IMPORT_PROBE = """
import sys
from composer.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
print("IMPORTED:" + ",".join(m for m in ("docker", "jinja2", "dotenv", "httpx") if m in sys.modules))
"""


@pytest.mark.parametrize(
    ("args", "allowed"),
    [(["--help"], set()), (["config"], {"dotenv"}), (["render", "--check"], {"dotenv", "jinja2"})],
)
def test_commands_import_only_what_they_need(
    empty_env_file: Path, args: list[str], allowed: set[str]
) -> None:
    import subprocess
    import sys

    argv = [sys.executable, "-c", _IMPORT_PROBE, "--env-file", str(empty_env_file), *args]
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("IMPORTED:")]
    imported = set(filter(None, line.removeprefix("IMPORTED:").split(",")))
    assert imported <= allowed, f"{args} imported {sorted(imported - allowed)}"


@pytest.mark.parametrize(
    ("dotenv", "environ", "flag", "expected"),
    [
        ("", {}, None, "8000"),
        ("VLLM_PORT=8003\n", {}, None, "8003"),
        ("VLLM_PORT=8003\n", {"VLLM_PORT": "8004"}, None, "8004"),
        ("VLLM_PORT=8003\n", {"VLLM_PORT": "8004"}, "port=8005", "8005"),
    ],
)
def test_rendered_defaults_follow_precedence(
    tmp_path: Path, dotenv: str, environ: dict[str, str], flag: str | None, expected: str
) -> None:
    env_file = tmp_path / "p.env"
    env_file.write_text(dotenv)
    sets = ["--set", flag] if flag else []
    direct = ["--set", "gateway.enabled=false"]  # the variant itself publishes the port
    result = run(
        "--env-file",
        str(env_file),
        *sets,
        *direct,
        "render",
        "mtp",
        "--out",
        str(tmp_path / "o"),
        env=environ,
    )
    assert result.exit_code == 0, result.stderr
    assert f'published: "${{VLLM_PORT:-{expected}}}"' in (tmp_path / "o" / "mtp.yml").read_text()
    assert f"VLLM_PORT={expected}; fi" in (tmp_path / "o" / "mtp.sh").read_text()
