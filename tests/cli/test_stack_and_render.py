"""Which files are read (--stack, the env file), what reaches the committed compose/ files,
restart policy, and bind mounts that refuse missing host paths."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from composer.stack.load import load_stack

from .conftest import REPO, invoke

API_KEY = "sk-test-0123456789abcdef"


def test_stack_alone_names_the_files_read_and_composer_toml_left_out(tmp_path: Path) -> None:
    extra = tmp_path / "extra.toml"
    extra.write_text('[stack]\nport = 8100\n[variants.extra]\nextends = "baseline"\n')
    result = invoke("--stack", str(extra), "config")
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert "define at least one image" in line and f"stack files read: {extra}" in line
    assert "composer.toml here was not read because --stack (or COMPOSER_STACK) replaces it" in line
    assert f"--stack composer.toml --stack {extra}" in line
    both = invoke("--stack", "composer.toml", "--stack", str(extra), "config", "--json")
    assert both.exit_code == 0, both.stderr
    assert json.loads(both.stdout)["stack"]["port"] == 8100


def test_config_names_the_env_file_actually_read(tmp_path: Path) -> None:
    result = invoke("--env-file", ".env.demo", "config", "--json")
    assert result.exit_code == 0, result.stderr
    sources = json.loads(result.stdout)["sources"]
    assert sources["stack.model_dir"] == ".env.demo MODEL_DIR"
    assert sources["images.vllm"] == ".env.demo VLLM_IMAGE"
    text = invoke("--env-file", ".env.demo", "config").stdout
    assert ".env.demo GPU_DEVICES" in text and " .env GPU_DEVICES" not in text


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the repository's stack, its committed compose/ files and .env.demo."""
    shutil.copy(REPO / "composer.toml", tmp_path / "composer.toml")
    shutil.copytree(REPO / "compose", tmp_path / "compose")
    shutil.copy(REPO / ".env.demo", tmp_path / ".env.demo")
    return tmp_path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_render_never_writes_env_values_into_the_committed_files(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    before = snapshot(project / "compose")
    result = invoke("--env-file", ".env.demo", "render", env={"VLLM_PORT": "9999"})
    assert result.exit_code == 0, result.stderr
    assert snapshot(project / "compose") == before  # the repository's files, byte for byte
    assert "are not written into compose/" in result.stderr and "--out DIR" in result.stderr
    check = invoke("--env-file", ".env.demo", "render", "--check")
    assert check.exit_code == 0, check.stdout
    refused = invoke("--set", "stack.port=8001", "render")
    assert refused.exit_code == 2 and "--out DIR" in refused.stderr
    assert snapshot(project / "compose") == before


def test_a_local_render_goes_to_out_with_the_local_values(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    result = invoke("--env-file", ".env.demo", "--set", "stack.port=8001", "render", "mtp", "--out", "local")
    assert result.exit_code == 0, result.stderr
    local = (project / "local" / "mtp.yml").read_text()
    assert "vllm-sim:latest" in local and "8001" in local
    assert "devices" not in local  # GPU_DEVICES=none in .env.demo
    committed = (project / "compose" / "mtp.yml").read_text()
    assert "vllm-sim" not in committed and "device_ids" in committed


def test_committed_files_carry_restart_policy_and_refuse_missing_host_paths() -> None:
    for path in sorted((REPO / "compose").glob("*.yml")):
        service = yaml.safe_load(path.read_text())["services"]["vllm"]
        assert service["restart"] == "unless-stopped"
        for volume in service["volumes"]:
            assert volume["type"] == "bind" and volume["bind"] == {"create_host_path": False}


@pytest.mark.parametrize("policy", ["no", "always", "on-failure", "unless-stopped"])
def test_restart_policy_is_configurable(tmp_path: Path, policy: str) -> None:
    result = invoke("--set", f"stack.restart={policy}", "render", "baseline", "--out", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert yaml.safe_load((tmp_path / "baseline.yml").read_text())["services"]["vllm"]["restart"] == policy


def test_a_bad_restart_policy_is_refused(tmp_path: Path) -> None:
    result = invoke("--set", "stack.restart=sometimes", "render", "--out", str(tmp_path))
    assert result.exit_code == 2
    assert "invalid stack.restart = 'sometimes'" in result.stderr
    assert "no, always, on-failure, unless-stopped" in result.stderr
    assert not tmp_path.joinpath("baseline.yml").exists()


def test_the_restart_policy_is_part_of_the_config_hash() -> None:
    from composer.render.target import resolve_target

    default = load_stack([REPO / "composer.toml"], None, environ={})
    never = load_stack([REPO / "composer.toml"], None, environ={}, flags=["stack.restart=no"])
    assert default.restart == "unless-stopped" and never.restart == "no"
    assert resolve_target(default, "mtp").hash != resolve_target(never, "mtp").hash


def test_launcher_refuses_a_missing_model_directory(tmp_path: Path) -> None:
    stub = tmp_path / "bin"
    stub.mkdir()
    called = tmp_path / "docker-called"
    (stub / "docker").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {called}\n')
    (stub / "docker").chmod(0o755)
    missing = tmp_path / "no-such-model"
    env = {"PATH": f"{stub}:/usr/bin:/bin", "VLLM_API_KEY": API_KEY, "MODEL_DIR": str(missing)}
    done = subprocess.run(
        ["bash", str(REPO / "compose" / "mtp.sh")], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1
    assert f"MODEL_DIR = {missing}: no such file or directory" in done.stderr
    assert not called.exists() and not missing.exists()
    missing.mkdir()
    relative = subprocess.run(
        ["bash", str(REPO / "compose" / "mtp.sh")],
        env={**env, "MODEL_DIR": missing.name},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert relative.returncode == 0, relative.stderr
    assert f'"source={missing}"' in called.read_text()  # made absolute against the working directory


def test_config_and_ls_show_each_variants_aliases(tmp_path: Path, no_docker: None) -> None:
    extra = tmp_path / "aliases.toml"
    extra.write_text('[gateway]\nswitch_on_model = true\n[variants.mtp]\naliases = ["fast", "opus-fast"]\n')
    files = ["-f", "composer.toml", "-f", str(extra), "--env-file", ".env.demo"]
    data = json.loads(invoke(*files, "config", "--json").stdout)
    assert data["variants"]["mtp"]["aliases"] == ["fast", "opus-fast"]
    assert data["variants"]["baseline"]["aliases"] == []
    assert "variants.mtp.aliases" in invoke(*files, "config").stdout
    listed = invoke(*files, "ls")
    assert listed.exit_code == 0, listed.output
    header, *rows = listed.stdout.splitlines()
    assert header.split()[-1] == "ALIASES"
    mtp = next(r for r in rows if r.split()[0] == "mtp")
    assert mtp.split()[-1] == "fast,opus-fast"
    rows_json = json.loads(invoke(*files, "ls", "--json").stdout)
    assert {r["variant"]: r["aliases"] for r in rows_json}["mtp"] == ["fast", "opus-fast"]
