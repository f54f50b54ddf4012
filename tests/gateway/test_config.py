"""Settings: defaults, validation (one line naming the variable, exit 2), the key never shown."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from composer.gateway import GatewayConfigError, load_config

from .fakes import REPO


def test_defaults() -> None:
    cfg = load_config({})
    assert (cfg.upstream, cfg.port, cfg.poll_interval, cfg.max_held) == ("http://vllm:8000", 8000, 0.1, 256)
    assert cfg.control_socket == "/run/gateway/control.sock"
    limits = (cfg.max_head_bytes, cfg.head_timeout, cfg.keep_alive_timeout, cfg.max_connections)
    assert limits == (65536, 10.0, 75.0, 1024)
    assert cfg.body_timeout == 60.0
    assert load_config({"GATEWAY_BODY_TIMEOUT": "2.5"}).body_timeout == 2.5


def test_connection_limits() -> None:
    cfg = load_config(
        {
            "GATEWAY_MAX_HEAD_BYTES": "8192",
            "GATEWAY_HEAD_TIMEOUT": "2.5",
            "GATEWAY_KEEP_ALIVE_TIMEOUT": "1",
            "GATEWAY_MAX_CONNECTIONS": "50",
        }
    )
    assert (cfg.max_head_bytes, cfg.head_timeout, cfg.keep_alive_timeout, cfg.max_connections) == (
        8192,
        2.5,
        1.0,
        50,
    )


def test_values_and_key_kept_out_of_repr() -> None:
    cfg = load_config(
        {
            "GATEWAY_UPSTREAM": "http://vllm-mtp:8001/",
            "GATEWAY_PORT": "9000",
            "GATEWAY_HOLD_TIMEOUT": "2.5",
            "GATEWAY_MAX_HELD": "3",
            "GATEWAY_POLL_INTERVAL": "0.05",
            "GATEWAY_SERVED_NAME": "qwen",
            "VLLM_API_KEY": "s3cret-value",
        }
    )
    assert cfg.upstream == "http://vllm-mtp:8001"
    assert (cfg.port, cfg.hold_timeout, cfg.max_held, cfg.poll_interval) == (9000, 2.5, 3, 0.05)
    assert cfg.api_key == "s3cret-value"
    assert "s3cret" not in repr(cfg)
    assert "s3cret" not in str(cfg.describe())
    assert cfg.describe()["api_key_set"] is True


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("GATEWAY_UPSTREAM", "vllm:8000"),
        ("GATEWAY_UPSTREAM", "http://vllm:8000/v1"),
        ("GATEWAY_UPSTREAM", "http://vllm:99999"),
        ("GATEWAY_PORT", "0"),
        ("GATEWAY_PORT", "eighty"),
        ("GATEWAY_HOLD_TIMEOUT", "-1"),
        ("GATEWAY_HOLD_TIMEOUT", "nan"),
        ("GATEWAY_MAX_HELD", "1.5"),
        ("GATEWAY_DRAIN_TIMEOUT", "soon"),
        ("GATEWAY_POLL_INTERVAL", "5"),
        ("GATEWAY_LOG_LEVEL", "loud"),
        ("GATEWAY_CONTROL_SOCKET", "relative.sock"),
        ("GATEWAY_MAX_HEAD_BYTES", "100"),
        ("GATEWAY_MAX_HEAD_BYTES", "64KiB"),
        ("GATEWAY_HEAD_TIMEOUT", "0"),
        ("GATEWAY_BODY_TIMEOUT", "0"),
        ("GATEWAY_BODY_TIMEOUT", "2h"),
        ("GATEWAY_KEEP_ALIVE_TIMEOUT", "forever"),
        ("GATEWAY_MAX_CONNECTIONS", "0"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(GatewayConfigError, match=name) as err:
        load_config({name: value})
    assert "allowed" in str(err.value)
    assert err.value.exit_code == 2


def test_server_exits_2_with_one_line_on_bad_setting() -> None:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "GATEWAY_MAX_HELD": "many"}
    done = subprocess.run(
        [sys.executable, "-m", "composer.gateway"], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "GATEWAY_MAX_HELD='many'" in done.stderr and "allowed" in done.stderr


def test_ctl_bad_usage_exits_2() -> None:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "composer.gateway.ctl", "frobnicate"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "frobnicate is not a request" in done.stderr


def test_ctl_unreachable_socket_exits_1_with_json(tmp_path) -> None:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)}
    sock = str(tmp_path / "none.sock")
    done = subprocess.run(
        [sys.executable, "-m", "composer.gateway.ctl", "--socket", sock, "GET", "/state"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert '"error"' in done.stdout and "none.sock" in done.stdout


def _imports_none(modules: str, bad: str) -> None:
    """Importing `modules` in a fresh interpreter loads no module `m` for which `bad` holds."""
    code = (
        f"import sys, {modules}; bad=[m for m in sys.modules if {bad}]; print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_package_root_imports_no_server_dependencies() -> None:
    _imports_none(
        "composer.gateway",
        "m.split('.')[0] in ('httpx','starlette','uvicorn','prometheus_client','docker','click','jinja2')",
    )


def test_server_modules_import_no_composer_host_dependencies() -> None:
    _imports_none(
        "composer.gateway.runtime, composer.gateway.ctl, composer.gateway.server",
        "m.split('.')[0] in ('docker','jinja2','dotenv','tenacity')"
        " or (m.startswith('composer.') and not m.startswith('composer.gateway') and m != 'composer.errors')",
    )


def test_image_lock_pins_the_same_versions_as_the_gateway_extra() -> None:
    import tomllib

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"][
        "gateway"
    ]
    lock = {
        line.split("==")[0].lower(): line.split("==")[1]
        for line in (REPO / "images/gateway/requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    for pin in extra:
        name, version = pin.split("==")
        assert lock.get(name.lower()) == version, pin
