"""`compose-spec config` names the layer that set each variant value: the file of a layered
override, a `--set` flag, or the file of the variant it extends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from composer.cli import main
from composer.errors import ConfigError
from composer.stack.load import load_stack
from tests.conftest import REPO

BASE = REPO / "composer.toml"
OVERRIDE = """\
[variants.mtp]
description = "mtp, tuned"
extra_args = ["--max-num-seqs", "64"]

[variants.mtp.env]
MTP_ONLY = "1"

[stack.env]
EVERYWHERE = "1"

[workloads]
chat-1 = "dflash2"
"""


def _sources(tmp_path: Path, *args: str) -> dict[str, tuple[str, str]]:
    """`config`'s rows as key -> (value, source): its --json rows, and the text rows of the
    env tables and workloads (values without spaces there)."""
    override = tmp_path / "site.toml"
    override.write_text(OVERRIDE, encoding="utf-8")
    env_file = tmp_path / "empty.env"
    env_file.write_text("")
    cli = ["--env-file", str(env_file), "--stack", str(BASE), "--stack", str(override), *args, "config"]
    text = CliRunner().invoke(main, cli, env={"COMPOSER_STACK": ""})
    data = CliRunner().invoke(main, [*cli, "--json"], env={"COMPOSER_STACK": ""})
    assert text.exit_code == 0 and data.exit_code == 0, text.output + data.output
    rows = {}
    for line in text.output.splitlines():
        parts = line.split()
        if parts and (".env." in parts[0] or parts[0].startswith("workloads.")):
            rows[parts[0]] = (parts[1], parts[2])
    rows.update({row["key"]: (row["value"], row["source"]) for row in json.loads(data.output)["settings"]})
    return rows


def test_a_layered_files_variant_values_name_that_file(tmp_path: Path) -> None:
    rows = _sources(tmp_path)
    assert rows["variants.mtp.description"] == ("mtp, tuned", "site.toml")
    assert rows["variants.mtp.extra_args"] == ("--max-num-seqs,64", "site.toml")
    assert rows["variants.mtp.image"] == ("vllm", "composer.toml")  # inherited from baseline
    assert rows["variants.mtp.env.MTP_ONLY"] == ("1", "site.toml")
    assert rows["variants.mtp.env.EVERYWHERE"] == ("1", "site.toml")
    assert rows["workloads.chat-1"] == ("dflash2", "site.toml")
    # what the override did not touch still names the shipped file
    assert rows["variants.dflash2.description"][1] == "composer.toml"
    assert rows["variants.dflash2.env.VLLM_WSL2_ENABLE_PIN_MEMORY"] == ("1", "composer.toml")
    assert rows["workloads.long-16"] == ("baseline", "composer.toml")
    # a variant that extends mtp inherits the override, and says where it came from
    assert rows["variants.mtp-dsd.extra_args"] == ("--max-num-seqs,64", "site.toml")
    assert rows["variants.mtp-dsd.description"][1] == "composer.toml"


def test_set_overrides_one_variants_keys_and_config_says_so(tmp_path: Path) -> None:
    rows = _sources(
        tmp_path,
        "--set",
        "variants.mtp.description=from-flag",
        "--set",
        "variants.mtp.image=dflash2",
        "--set",
        'variants.mtp.extra_args=["--max-num-seqs","32"]',
        "--set",
        'variants.mtp.aliases=["fast"]',
    )
    assert rows["variants.mtp.description"] == ("from-flag", "flag --set")
    assert rows["variants.mtp.image"] == ("dflash2", "flag --set")
    assert rows["variants.mtp.extra_args"][1] == "flag --set"
    assert rows["variants.mtp.aliases"][1] == "flag --set"
    assert rows["variants.baseline.image"] == ("vllm", "composer.toml")


def test_set_values_reach_the_variant(tmp_path: Path, empty_env_file: Path) -> None:
    flags = ['variants.mtp.extra_args=["--max-num-seqs","32"]', "variants.mtp.image=dflash2"]
    stack = load_stack([BASE], empty_env_file, environ={}, flags=flags)
    assert stack.variant("mtp").extra_args == ("--max-num-seqs", "32")
    assert stack.variant("mtp").image_key == "dflash2"
    assert stack.variant("baseline").extra_args == ()


@pytest.mark.parametrize(
    ("flag", "fragment"),
    [
        ("variants.mtp.extra_args=--enforce-eager", "expected a list of strings"),
        ("variants.mtp.image=nope", "expected a key of [images], one of dflash2, vllm"),
    ],
)
def test_bad_set_values_name_the_flag_and_what_is_allowed(
    empty_env_file: Path, flag: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_stack([BASE], empty_env_file, environ={}, flags=[flag])
    assert f"(from flag --set): {fragment}" in str(err.value)
