"""Container logs: rotation on every rendered container, and the probes kept out of vLLM's
access log (`--disable-access-log-for-endpoints`) unless `stack.log_probes`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from composer.errors import ConfigError
from composer.render.files import render_all
from composer.render.spec import PROBE_ENDPOINTS, QUIET_PROBES_FLAG, docker_size, resolve
from composer.render.target import resolve_target
from composer.stack.load import load_stack


def _stack(env_file: Path, *flags: str):
    return load_stack(None, env_file, environ={}, flags=flags)


def test_every_rendered_container_rotates_its_log(empty_env_file: Path, tmp_path: Path) -> None:
    stack = _stack(empty_env_file)
    files = {f.path.name: f.content for f in render_all(stack, ["mtp"], tmp_path)}
    services = yaml.safe_load(files["mtp.yml"])["services"]
    for name in ("vllm", "gateway"):
        assert services[name]["logging"] == {
            "driver": "json-file",
            "options": {"max-size": "50m", "max-file": "5"},
        }, name
    assert "--log-driver json-file" in files["mtp.sh"]
    assert "--log-opt max-size=50m" in files["mtp.sh"] and "--log-opt max-file=5" in files["mtp.sh"]


def test_rotation_follows_the_stack_keys(empty_env_file: Path) -> None:
    stack = _stack(empty_env_file, "stack.log_max_size=1GiB", "stack.log_max_files=2")
    spec = resolve_target(stack, "baseline").spec
    assert dict(spec.logging) == {"max-size": "1g", "max-file": "2"}


@pytest.mark.parametrize(
    "flag", ["stack.log_max_files=0", "stack.log_max_files=101", "stack.log_max_size=-1"]
)
def test_bad_rotation_values_are_refused(empty_env_file: Path, flag: str) -> None:
    with pytest.raises(ConfigError, match=flag.split("=")[0].removeprefix("stack.")):
        _stack(empty_env_file, flag)


def test_docker_sizes_are_whole_units_when_they_can_be() -> None:
    assert [docker_size(n) for n in (50 << 20, 512 << 10, 3 << 30, 1000)] == ["50m", "512k", "3g", "1000"]


def test_probes_are_kept_out_of_the_access_log_by_default(empty_env_file: Path) -> None:
    command = [resolve(part, {}) for part in resolve_target(_stack(empty_env_file), "mtp").spec.command]
    at = command.index(QUIET_PROBES_FLAG)
    assert command[at + 1] == ",".join(PROBE_ENDPOINTS) and "/health" in PROBE_ENDPOINTS


def test_log_probes_renders_no_filter(empty_env_file: Path) -> None:
    command = [
        str(p) for p in resolve_target(_stack(empty_env_file, "stack.log_probes=true"), "mtp").spec.command
    ]
    assert QUIET_PROBES_FLAG not in command


def test_an_image_without_the_flag_is_diagnosed_with_the_key_to_set() -> None:
    from composer.engine import diagnose

    line = "vllm serve: error: unrecognized arguments: --disable-access-log-for-endpoints /health,/metrics"
    found = diagnose.explain(line)
    assert found[0].name == "access-log-flag-unknown" and "log_probes = true" in found[0].fix
