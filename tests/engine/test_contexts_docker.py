"""`--context NAME` on a second Docker engine: a baseline -> mtp swap and a rollback happen
there, while the first engine's container of the same project and service is untouched."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from composer.doctor.remote_checks import check_mounts_on_engine, mount_checks
from composer.doctor.report import variant_facts
from composer.engine.client import Endpoint
from composer.render.target import resolve_target
from composer.stack.load import load_stack
from tests.conftest import REPO, free_port
from tests.doctor.fakes import facts

from .conftest import SecondEngine

pytestmark = pytest.mark.docker

# Direct mode: the second engine runs with --iptables=false (it must leave the first
# engine's firewall rules alone), and without its rules the embedded DNS that the gateway
# needs to reach the variant by service name does not answer inside containers.
STACK = """
[stack]
project = "{project}"
probation = "0s"
[gateway]
enabled = false
[stack.env]
SIM_LOAD_SECONDS = "0.3"
SIM_TIME_SCALE = "20"

[variants.mtp-crash]
extends = "mtp"
env = {{ SIM_FAIL = "crash" }}
"""


@pytest.fixture
def project(tmp_path: Path):
    name = f"vct{uuid.uuid4().hex[:10]}"
    (tmp_path / "stack.toml").write_text(STACK.format(project=name))
    yield name


def _cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 180):
    full_env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "VLLM_PORT",
            "COMPOSE_PROJECT_NAME",
            "MODEL_DIR",
            "VLLM_IMAGE",
            "DOCKER_HOST",
            "DOCKER_CONTEXT",
        }
    }
    full_env |= {
        "VLLM_API_KEY": (tmp_path / "key").read_text(),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_RUNTIME_DIR": str(tmp_path),
    }
    full_env |= env or {}
    argv = [sys.executable, "-m", "composer", "--env-file", str(REPO / ".env.demo")]
    argv += ["--stack", str(REPO / "composer.toml"), "--stack", str(tmp_path / "stack.toml"), *args]
    return subprocess.run(argv, capture_output=True, text=True, env=full_env, cwd=REPO, timeout=timeout)


def _ours(client, project: str) -> list:
    return client.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"})


def _variants(client, project: str) -> list:
    """The project's variant containers (the gateway in front of them is not one)."""
    return [c for c in _ours(client, project) if "vllm-composer.variant" in c.labels]


def test_swap_and_rollback_on_the_second_engine_leave_the_first_untouched(
    second_engine: SecondEngine, docker_client, project: str, tmp_path: Path
) -> None:
    (tmp_path / "key").write_text(secrets.token_urlsafe(24))
    local_port, remote_port = free_port(), free_port()
    remote = ("--context", second_engine.context)
    try:
        # The first engine serves baseline for the same project and service.
        done = _cli(tmp_path, "--set", f"stack.port={local_port}", "up", "baseline")
        assert done.returncode == 0, done.stderr
        (sentinel,) = _variants(docker_client, project)
        first_engine = sorted(c.id for c in _ours(docker_client, project))  # the variant and the gateway
        sentinel_started = sentinel.attrs["State"]["StartedAt"]

        on_second = ("--set", f"stack.port={remote_port}")
        for variant in ("baseline", "mtp"):
            done = _cli(tmp_path, *remote, *on_second, "up", variant)
            assert done.returncode == 0, done.stderr
        done = _cli(tmp_path, *remote, *on_second, "up", "mtp-crash")
        assert done.returncode == 1
        assert "rolled back" in done.stderr, done.stderr

        status = _cli(tmp_path, *remote, *on_second, "status", "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["variant"] == "mtp"
        (serving,) = [c for c in _variants(second_engine.client, project) if c.status == "running"]
        assert serving.labels["vllm-composer.variant"] == "mtp"
        # DOCKER_HOST reaches the same engine without --context.
        via_host = _cli(
            tmp_path, *on_second, "status", "--json", env={"DOCKER_HOST": f"unix://{second_engine.socket}"}
        )
        assert json.loads(via_host.stdout)["variant"] == "mtp"
        logs = _cli(tmp_path, *remote, *on_second, "logs", "--tail", "5")
        assert logs.returncode == 0 and logs.stdout.strip()
        doctor = _cli(tmp_path, *remote, *on_second, "doctor", "mtp", "--json")
        checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"] if c["variant"] in (None, "mtp")}
        assert second_engine.context in checks["docker-endpoint"]["detail"]
        assert checks["port"]["status"] == "ok" and checks["mounts"]["status"] == "ok"

        # The first engine's container: the same one, never restarted, still baseline.
        sentinel.reload()
        assert [c.id for c in _variants(docker_client, project)] == [sentinel.id]
        assert sorted(c.id for c in _ours(docker_client, project)) == first_engine
        assert sentinel.status == "running"
        assert sentinel.attrs["State"]["StartedAt"] == sentinel_started
        assert sentinel.labels["vllm-composer.variant"] == "baseline"

        done = _cli(tmp_path, *remote, *on_second, "down")
        assert done.returncode == 0, done.stderr
        assert _ours(second_engine.client, project) == []
        sentinel.reload()
        assert sentinel.status == "running"
    finally:
        _cli(tmp_path, "--set", f"stack.port={local_port}", "down")
        _cli(tmp_path, *remote, "down")


def test_host_paths_are_checked_on_the_engine_without_creating_them(
    second_engine: SecondEngine, tmp_path: Path
) -> None:
    missing = tmp_path / "not-there" / "model"
    stack = load_stack(
        [REPO / "composer.toml"],
        REPO / ".env.demo",
        environ={"MODEL_DIR": str(REPO / "images/sim/models/Qwen3.8-27B")},
    )
    ok = check_mounts_on_engine(facts(stack, "mtp"), second_engine.client, "engine-2")
    assert [f.status for f in ok] == ["ok"] and "exists on engine-2" in ok[0].detail

    stack = load_stack([REPO / "composer.toml"], REPO / ".env.demo", environ={"MODEL_DIR": str(missing)})
    target = variant_facts(resolve_target(stack, "mtp"))
    # A remote endpoint routes the check to the engine, whatever this machine has.
    (found,) = mount_checks(target, second_engine.client, Endpoint("gpu-box", "ssh://user@gpu-box"))
    assert found.status == "fail"
    assert f"{missing} (mounted at /models/Qwen3.8-27B) does not exist on gpu-box" in found.detail
    assert "MODEL_DIR" in found.fix
    assert not missing.exists()  # a plain -v would have created it
    probes = second_engine.client.containers.list(all=True, filters={"label": "vllm-composer.doctor-probe"})
    assert probes == []
