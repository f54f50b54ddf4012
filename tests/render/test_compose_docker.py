"""The real Compose v2 plugin accepts every rendered file, and the container a launcher
would create agrees with the compose service on image, command, environment, mounts,
ports and GPUs."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from composer.render.files import render_all
from composer.render.gateway import CPU_SHARES
from composer.render.target import resolve_target
from composer.stack.model import Stack
from tests.conftest import shipped_variants

from .conftest import REPO
from .helpers import (
    clean_environ,
    comparable,
    container_from_compose,
    container_from_run_argv,
    container_from_spec,
    run_launcher,
)
from .odd import odd_stack

pytestmark = pytest.mark.docker
VARIANTS = shipped_variants()  # the committed files of every shipped variant
API_KEY = "sk-test-0123456789abcdef"
OVERRIDES = {
    "VLLM_PORT": "8123",
    "VLLM_BIND_ADDRESS": "0.0.0.0",
    "GPU_DEVICES": "1,3",
    "MODEL_DIR": "/srv/models/$target dir",  # single-quoted in the env file: literal
    "DRAFT_DIR": "/srv/models/draft",
    "KV_CACHE_MEMORY": "4294967296",
    "NUM_SPECULATIVE_TOKENS": "3",
    "VLLM_IMAGE": "local/vllm:test",
    "DFLASH2_IMAGE": "local/dflash2:test",
}
MOUNT_DEFAULTS = {"MODEL_DIR": "/models/model", "DRAFT_DIR": "/models/draft"}


def _host_dirs(tmp_path: Path, values: dict[str, str]) -> dict[str, str]:
    """`values` with MODEL_DIR and DRAFT_DIR as existing directories under tmp_path (same
    text below it): the launcher refuses a mount source that does not exist."""
    dirs = {name: str(tmp_path) + values.get(name, default) for name, default in MOUNT_DEFAULTS.items()}
    for path in dirs.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    return {**values, **dirs}


def _env_file(tmp_path: Path, values: dict[str, str]) -> Path:
    path = tmp_path / "sample.env"
    path.write_text("".join(f"{k}='{v}'\n" for k, v in values.items()))
    return path


def compose_config(compose_file: Path, env_file: Path) -> dict:
    """`docker compose config --format json` of one file, run with a clean environment."""
    result = subprocess.run(
        [
            "docker",
            "compose",
            "--env-file",
            str(env_file),
            "-f",
            str(compose_file),
            "config",
            "--format",
            "json",
        ],
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("variant", VARIANTS)
def test_compose_accepts_the_committed_file(tmp_path: Path, variant: str) -> None:
    config = compose_config(
        REPO / "compose" / f"{variant}.yml", _env_file(tmp_path, {"VLLM_API_KEY": API_KEY})
    )
    assert sorted(config["services"]) == ["gateway", "gateway-port", "vllm"] and config["name"] == "vllm"
    assert "ports" not in config["services"]["vllm"]  # only the port holder publishes the shared port
    assert "ports" not in config["services"]["gateway"]
    (port,) = config["services"]["gateway-port"]["ports"]
    assert (port["host_ip"], str(port["published"]), port["target"]) == ("127.0.0.1", "8000", 8000)
    # the gateway serves in the holder's network, which answers to the gateway's name
    assert config["services"]["gateway"]["network_mode"] == "service:gateway-port"
    assert config["services"]["gateway-port"]["networks"]["default"]["aliases"] == ["gateway"]
    assert config["services"]["gateway-port"]["sysctls"] == {"net.ipv4.tcp_migrate_req": "1"}
    assert config["services"]["gateway"]["cpu_shares"] == CPU_SHARES  # runs first when the CPUs are busy


def test_compose_refuses_a_missing_api_key(tmp_path: Path) -> None:
    result = subprocess.run(
        ["docker", "compose", "--env-file", str(_env_file(tmp_path, {})), "-f", "compose/mtp.yml", "config"],
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "set VLLM_API_KEY" in result.stderr


@pytest.mark.parametrize("overrides", [False, True], ids=["defaults", "overrides"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_launcher_and_compose_agree(
    tmp_path: Path, stub_dir: Path, default_stack: Stack, variant: str, overrides: bool
) -> None:
    values = _host_dirs(tmp_path, {"VLLM_API_KEY": API_KEY, **(OVERRIDES if overrides else {})})
    services = compose_config(REPO / "compose" / f"{variant}.yml", _env_file(tmp_path, values))["services"]
    service = services["vllm"]
    from_compose = container_from_compose(service, unescape=True)
    argv = run_launcher(REPO / "compose" / f"{variant}.sh", stub_dir, clean_environ(**values))
    from_launcher = container_from_run_argv(argv, values)
    assert comparable(from_launcher) == comparable(from_compose)
    assert comparable(from_launcher) == comparable(
        container_from_spec(resolve_target(default_stack, variant).spec, values)
    )
    assert from_launcher["name"] == "vllm-vllm-1"
    assert from_launcher["ports"] == []  # behind the gateway, on the project's network
    assert from_launcher["network-alias"] == "vllm"
    gateway_ports = container_from_compose(
        services["gateway-port"] | {"command": [], "volumes": [], "environment": {}}, unescape=True
    )["ports"]
    if overrides:
        assert from_launcher["gpus"] == {"1", "3"} and gateway_ports == [("0.0.0.0", "8123", 8000)]


@pytest.mark.parametrize("variant", VARIANTS)
def test_odd_values_survive_compose_and_the_launcher(
    tmp_path: Path, stub_dir: Path, default_stack: Stack, variant: str
) -> None:
    """Quotes, `$`, globs, unicode and newlines reach compose and docker run unchanged."""
    stack = odd_stack(default_stack)
    stack = replace(
        stack, model_dir=str(tmp_path) + stack.model_dir, draft_dir=str(tmp_path) + stack.draft_dir
    )
    for path in (stack.model_dir, stack.draft_dir):
        Path(path).mkdir(parents=True, exist_ok=True)
    files = {f.path.suffix: f for f in render_all(stack, [variant], tmp_path)}
    for file in files.values():
        file.path.write_text(file.content)
    env_file = _env_file(tmp_path, {"VLLM_API_KEY": API_KEY})
    service = compose_config(files[".yml"].path, env_file)["services"]["on"]
    argv = run_launcher(files[".sh"].path, stub_dir, clean_environ(VLLM_API_KEY=API_KEY))
    intended = comparable(container_from_spec(resolve_target(stack, variant).spec, {"VLLM_API_KEY": API_KEY}))
    assert comparable(container_from_run_argv(argv, {"VLLM_API_KEY": API_KEY})) == intended
    assert comparable(container_from_compose(service, unescape=True)) == intended


def test_no_gpus_and_an_ipv6_bind_agree(tmp_path: Path, stub_dir: Path, default_stack: Stack) -> None:
    dirs = _host_dirs(tmp_path, {})
    stack = replace(
        default_stack, gpus=None, bind_address="::1", model_dir=dirs["MODEL_DIR"], draft_dir=dirs["DRAFT_DIR"]
    )
    files = {f.path.suffix: f for f in render_all(stack, ["mtp"], tmp_path)}
    for file in files.values():
        file.path.write_text(file.content)
    assert "deploy:" not in files[".yml"].content and "--gpus" not in files[".sh"].content
    services = compose_config(files[".yml"].path, _env_file(tmp_path, {"VLLM_API_KEY": API_KEY}))["services"]
    argv = run_launcher(files[".sh"].path, stub_dir, clean_environ(VLLM_API_KEY=API_KEY))
    from_launcher = comparable(container_from_run_argv(argv, {"VLLM_API_KEY": API_KEY}))
    assert from_launcher == comparable(container_from_compose(services["vllm"], unescape=True))
    assert from_launcher["gpus"] is None and from_launcher["ports"] == []
    gateway_ports = container_from_compose(
        services["gateway-port"] | {"command": [], "volumes": [], "environment": {}}, unescape=True
    )["ports"]
    assert gateway_ports == [("::1", "8000", 8000)]
    direct = replace(stack, gateway=replace(stack.gateway, enabled=False))
    (tmp_path / "direct").mkdir()
    files = {f.path.suffix: f for f in render_all(direct, ["mtp"], tmp_path / "direct")}
    for file in files.values():
        file.path.write_text(file.content)
    argv = run_launcher(files[".sh"].path, stub_dir, clean_environ(VLLM_API_KEY=API_KEY))
    assert container_from_run_argv(argv, {"VLLM_API_KEY": API_KEY})["ports"] == [("::1", "8000", 8000)]
