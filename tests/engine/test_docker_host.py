"""DOCKER_HOST and DOCKER_CONTEXT as the user sets them: a bad address or an ssh:// one is one
line and exit 2 naming the allowed forms; an unknown context is never offered as a choice."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from composer.cli import main
from composer.engine.client import check_docker_host, engine_endpoint, select_context
from composer.errors import UsageError

STUB = """#!/bin/sh
# `docker context ls` lists DOCKER_CONTEXT's name even when it does not exist, like the real CLI.
if [ "$1 $2" = "context ls" ]; then echo default; echo remote; [ -n "$DOCKER_CONTEXT" ] && echo "$DOCKER_CONTEXT"; exit 0; fi
if [ "$1 $2" = "context inspect" ]; then echo "context $3: not found" >&2; echo "[]"; exit 1; fi
exit 1
"""


@pytest.mark.parametrize(
    "host",
    ["unix:///var/run/docker.sock", "tcp://10.0.0.5:2376", "tcp://[::1]:2375", "npipe:////./pipe/docker"],
)
def test_engine_addresses_are_taken(host: str) -> None:
    assert check_docker_host(host) == host


@pytest.mark.parametrize(
    "host", ["http://[::1", "tcp://:x", "foo", "tcp://host:99999", "unix://", "http://h:1"]
)
def test_a_bad_docker_host_names_the_allowed_forms(host: str) -> None:
    with pytest.raises(UsageError) as err:
        check_docker_host(host)
    assert str(err.value).startswith(f"DOCKER_HOST={host!r} is not a Docker engine address: expected unix://")
    assert "tcp://HOST:PORT" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("value", ["http://[::1", "ssh://me@gpu-box"])
def test_the_command_line_refuses_it_in_one_line_with_exit_2(value: str) -> None:
    result = CliRunner().invoke(main, ["ps"], env={"DOCKER_HOST": value})
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "DOCKER_HOST=" in lines[0] and "internal error" not in lines[0]
    if value.startswith("ssh"):
        assert "docker context create NAME --docker host=ssh://" in lines[0] and "--context NAME" in lines[0]
        assert "paramiko" not in lines[0]


def test_an_unknown_context_is_not_offered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stub = tmp_path / "docker"
    stub.write_text(STUB)
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setenv("DOCKER_CONTEXT", "nosuch")
    select_context(None)
    with pytest.raises(UsageError) as err:
        engine_endpoint()
    assert str(err.value) == "unknown Docker context 'nosuch': choose one of default, remote"
    select_context("gone")
    try:
        with pytest.raises(UsageError, match=r"choose one of default, remote$"):
            engine_endpoint()
    finally:
        select_context(None)
