"""The settings table: every key the loader reads, described once; the committed JSON Schema
generated from it; `config` listing every key with units and `--set` suggesting close keys."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jsonschema
import pytest

from composer.stack.gateway import GATEWAY_SETTINGS
from composer.stack.kubernetes import KUBE_SETTINGS
from composer.stack.schema import json_schema
from composer.stack.settings import KEYS, STACK_SETTINGS
from tests.cli.conftest import REPO, invoke

SCHEMA = REPO / "schema" / "composer.schema.json"
TABLE_KEYS = {  # what the loader reads per table
    "stack": (*(s.key for s in STACK_SETTINGS), "env"),
    "gateway": tuple(key for key, *_ in GATEWAY_SETTINGS),
    "kubernetes": tuple(key for key, *_ in KUBE_SETTINGS),
}


def test_the_table_names_exactly_the_keys_the_loader_reads() -> None:
    for table, loaded in TABLE_KEYS.items():
        assert {k.name for k in KEYS if k.table == table} == set(loaded), table
    assert all(k.description and "\n" not in k.description for k in KEYS)


def test_the_committed_schema_is_generated_from_the_table() -> None:
    assert json.loads(SCHEMA.read_text()) == json_schema(), (
        "schema/composer.schema.json is stale: run `compose-spec config --schema > schema/composer.schema.json`"
    )
    jsonschema.Draft202012Validator.check_schema(json_schema())


@pytest.mark.parametrize("stack_file", ["composer.toml", "images/sim/demo.toml", "images/vllm-cpu/cpu.toml"])
def test_the_schema_validates_the_shipped_stacks(stack_file: str) -> None:
    data = tomllib.loads((REPO / stack_file).read_text())
    errors = [e.message for e in jsonschema.Draft202012Validator(json_schema()).iter_errors(data)]
    assert errors == []


@pytest.mark.parametrize(
    ("table", "key"), [("gateway", "hold_timout"), ("stack", "prot"), ("kubernetes", "namespac")]
)
def test_the_schema_rejects_a_typo(table: str, key: str) -> None:
    data = tomllib.loads((REPO / "composer.toml").read_text())
    data.setdefault(table, {})[key] = 1
    errors = [e.message for e in jsonschema.Draft202012Validator(json_schema()).iter_errors(data)]
    assert errors == [f"Additional properties are not allowed ({key!r} was unexpected)"]


def test_the_schema_rejects_a_typo_in_a_variant() -> None:
    data = tomllib.loads((REPO / "composer.toml").read_text())
    data["variants"]["mtp"]["kv_cache_memroy"] = "7GiB"
    assert list(jsonschema.Draft202012Validator(json_schema()).iter_errors(data))


def test_the_starter_stack_points_editors_at_the_schema() -> None:
    first = (REPO / "composer.toml").read_text().splitlines()[0]
    assert first == "#:schema ./schema/composer.schema.json"
    assert (REPO / first.split()[1]).is_file()


def test_config_lists_every_table_with_units_and_descriptions(empty_env_file: Path) -> None:
    result = invoke("config", "--env-file", str(empty_env_file))
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.stdout.splitlines()}
    for key in TABLE_KEYS["gateway"]:
        assert f"gateway.{key}" in rows
    for key in TABLE_KEYS["kubernetes"]:
        assert f"kubernetes.{key}" in rows
    assert rows["variants.baseline.kv_cache_memory"].split()[1:3] == ["7.0GiB", "composer.toml"]
    assert rows["stack.start_period"].split()[1:3] == ["15m", "composer.toml"]
    # unset, it follows the start budget (start_period is longer than the 5m default)
    assert rows["gateway.hold_timeout"].split()[1:4] == ["15m", "default", "(stack.start_period)"]
    assert rows["gateway.enabled"].split()[1:3] == ["true", "default"]
    assert "how long a request may be held" in rows["gateway.hold_timeout"]
    assert "None" not in result.stdout and "True" not in result.stdout


def test_config_names_where_a_value_was_set(empty_env_file: Path) -> None:
    result = invoke(
        "config",
        "--env-file",
        str(empty_env_file),
        "--set",
        "gateway.hold_timeout=2m",
        env={"GATEWAY_MAX_HELD": "9"},
    )
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()}
    assert rows["gateway.hold_timeout"][1:4] == ["2m", "flag", "--set"]
    assert rows["gateway.max_held"][1:4] == ["9", "environment", "GATEWAY_MAX_HELD"]


def test_config_keys_lists_the_table() -> None:
    result = invoke("config", "--keys")
    assert result.exit_code == 0
    listed = [line.split()[0] for line in result.stdout.splitlines()]
    assert listed == [k.dotted for k in KEYS]


@pytest.mark.parametrize(
    ("flag", "suggestion"),
    [
        ("gateway.hold_timout=3", "gateway.hold_timeout"),
        ("variants.mtp.kv_cache_memroy=1G", "variants.mtp.kv_cache_memory"),
    ],
)
def test_set_suggests_the_close_key(flag: str, suggestion: str, empty_env_file: Path) -> None:
    result = invoke("config", "--env-file", str(empty_env_file), "--set", flag)
    assert result.exit_code == 2
    assert f"did you mean {suggestion!r}?" in result.stderr and "config --keys" in result.stderr
