"""Shared helpers: a model of compose interpolation, a stub `docker` that records its argv,
and one comparable shape for a container from a spec, a compose service or `docker run` argv."""

from __future__ import annotations

import csv
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from composer.render.spec import LOG_DRIVER, ServiceSpec, resolve
from tests.conftest import ENV_VARS_READ as ENV_VARS_READ  # re-exported: the stack tests use it

STUB_DOCKER = """#!/usr/bin/env bash
# Records its argv, NUL-separated, in $STUB_ARGV_FILE instead of running anything.
printf '%s\\0' "$@" > "$STUB_ARGV_FILE"
"""

_BRACED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-?])([^}\n]*))?\}")


def clean_environ(**extra: str) -> dict[str, str]:
    """A minimal environment without any variable the stack reads."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    env.update(extra)
    return env


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """compose's interpolation for the forms the renderer emits: `$$`, `${V:-d}`, `${V:?m}`."""
    out: list[str] = []
    i = 0
    while i < len(value):
        if value.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        if value[i] != "$":
            out.append(value[i])
            i += 1
            continue
        match = _BRACED.match(value, i)
        assert match, f"unexpected interpolation at {value[i:]!r}"
        name, op, arg = match.groups()
        if env.get(name):
            out.append(env[name])
        elif op == "-":
            out.append(arg.replace("$$", "$"))
        else:
            raise AssertionError(f"{name} is required: {arg}")
        i = match.end()
    return "".join(out)


def interpolate_tree(node: object, env: Mapping[str, str]) -> object:
    """interpolate() applied to every string in a parsed YAML document."""
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [interpolate_tree(n, env) for n in node]
    if isinstance(node, dict):
        return {k: interpolate_tree(val, env) for k, val in node.items()}
    return node


def install_stub_docker(directory: Path) -> Path:
    """Write the stub `docker` into `directory` and return the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    stub = directory / "docker"
    stub.write_text(STUB_DOCKER)
    stub.chmod(0o755)
    return directory


def run_launcher(launcher: Path, stub_dir: Path, env: Mapping[str, str]) -> list[str]:
    """Run a launcher with the stub docker first on PATH; the argv docker would get."""
    argv_file = stub_dir / "argv"
    argv_file.unlink(missing_ok=True)
    full_env = {**env, "PATH": f"{stub_dir}:{os.environ['PATH']}", "STUB_ARGV_FILE": str(argv_file)}
    result = subprocess.run(
        ["bash", str(launcher)], env=full_env, stdin=subprocess.DEVNULL, capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    data = argv_file.read_bytes().decode()
    assert data.endswith("\0")
    return data[:-1].split("\0")


def _csv_fields(value: str) -> list[str]:
    return next(csv.reader([value]))


def container_from_run_argv(argv: list[str], env: Mapping[str, str]) -> dict[str, object]:
    """The comparable shape of the container a `docker run` argv creates."""
    assert argv[:2] == ["run", "--rm"], argv[:2]
    shape: dict[str, object] = {
        "environment": {},
        "labels": {},
        "mounts": [],
        "ports": [],
        "gpus": None,
        "log-opt": {},
        "init": False,
    }
    i = 2
    while argv[i] != "--":
        option = argv[i]
        if option in {"--interactive", "--tty"}:
            i += 1
            continue
        if option == "--init":
            shape["init"] = True
            i += 1
            continue
        value = argv[i + 1]
        i += 2
        if option == "--env":
            name, sep, val = value.partition("=")
            shape["environment"][name] = val if sep else env[name]  # type: ignore[index]
        elif option == "--label":
            key, _, val = value.partition("=")
            shape["labels"][key] = val  # type: ignore[index]
        elif option == "--log-opt":
            key, _, val = value.partition("=")
            shape["log-opt"][key] = val  # type: ignore[index]
        elif option == "--mount":
            fields = dict(f.split("=", 1) if "=" in f else (f, "true") for f in _csv_fields(value))
            assert fields.pop("type") == "bind"
            read_only = fields.pop("readonly", "false") == "true"
            shape["mounts"].append((fields["source"], fields["target"], read_only))  # type: ignore[union-attr]
        elif option == "--publish":
            host, port, target = value.rsplit(":", 2)
            shape["ports"].append((host.strip("[]"), port, int(target)))  # type: ignore[union-attr]
        elif option == "--gpus":
            (field,) = _csv_fields(value)
            key, _, ids = field.partition("=")
            assert key == "device"
            shape["gpus"] = frozenset(ids.split(","))
        else:
            shape[option.lstrip("-")] = value
    shape["image"] = argv[i + 1]
    shape["command"] = argv[i + 2 :]
    shape["mounts"] = sorted(shape["mounts"])  # type: ignore[type-var]
    shape["logging"] = (shape.pop("log-driver", None), shape.pop("log-opt"))
    return shape


def container_from_compose(service: Mapping, unescape: bool) -> dict[str, object]:
    """The comparable shape of a compose service (`unescape`: undo config's `$$`)."""

    def u(text: object) -> str:
        return str(text).replace("$$", "$") if unescape else str(text)

    devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    gpus = None
    if devices:
        gpus = frozenset(i for ids in devices[0]["device_ids"] for i in u(ids).split(","))
    logging = service.get("logging") or {}
    return {
        "image": u(service["image"]),
        "command": [u(a) for a in service["command"]],
        "environment": {k: u(val) for k, val in service["environment"].items()},
        "labels": {k: u(val) for k, val in service["labels"].items()},
        "mounts": sorted((u(m["source"]), u(m["target"]), bool(m["read_only"])) for m in service["volumes"]),
        "ports": [(u(p["host_ip"]), u(p["published"]), int(p["target"])) for p in service.get("ports", [])],
        "gpus": gpus,
        "logging": (logging.get("driver"), {k: u(val) for k, val in (logging.get("options") or {}).items()}),
        "init": service.get("init") is True,
    }


def container_from_spec(spec: ServiceSpec, env: Mapping[str, str]) -> dict[str, object]:
    """The comparable shape the spec intends, host variables taken from `env`."""
    values = {k: val for k, val in env.items() if val}
    environment = dict(spec.environment)
    environment.update({name: env[name] for name in spec.secret_env})
    return {
        "image": resolve(spec.image, values),
        "command": [resolve(a, values) for a in spec.command],
        "environment": environment,
        "labels": dict(spec.labels),
        "mounts": sorted((resolve(m.source, values), m.target, m.read_only) for m in spec.mounts),
        "ports": [(resolve(spec.host_ip, values), resolve(spec.published_port, values), spec.container_port)]
        if spec.publishes
        else [],
        "gpus": None if spec.gpus is None else frozenset(resolve(spec.gpus, values).split(",")),
        "logging": (LOG_DRIVER if spec.logging else None, dict(spec.logging)),
        "init": True,  # an init process as PID 1: a stop signal ends the server even before its handler
    }


def comparable(shape: Mapping[str, object]) -> dict[str, object]:
    """Only the keys the compose file and the launcher must agree on."""
    keys = ("image", "command", "environment", "labels", "mounts", "ports", "gpus", "logging")
    return {k: shape[k] for k in keys}
