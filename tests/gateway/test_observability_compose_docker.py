"""The observability profile on a real compose stack (simulator): `compose-spec up baseline
--with prometheus` starts the rendered Prometheus beside the gateway; through its HTTP API
the gateway's and the variant's targets are up and a gateway series exists. Then a switch
to mtp, and the gateway's switch history survives a restart of its container."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from composer import __version__
from composer import labels as label_names
from tests.conftest import REPO, free_port, isolated_env, remove_project

pytestmark = pytest.mark.docker

PROMETHEUS_IMAGE = os.environ.get("PROMETHEUS_IMAGE") or f"vllm-composer-prometheus:{__version__}"


@dataclass
class ObsStack:
    project: str
    port: int
    prom_port: int
    env: dict[str, str]
    stack_file: Path

    def run(self, *extra: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "composer", "--env-file", str(REPO / ".env.demo")]
        argv += ["--stack", str(REPO / "composer.toml"), "--stack", str(self.stack_file), *extra]
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=REPO, timeout=timeout)

    @property
    def prometheus(self) -> str:
        return f"http://127.0.0.1:{self.prom_port}"

    def query(self, expr: str) -> list[dict]:
        reply = httpx.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=10)
        assert reply.status_code == 200, reply.text
        return reply.json()["data"]["result"]

    def status(self) -> dict:
        key = self.env["VLLM_API_KEY"]
        reply = httpx.get(
            f"http://127.0.0.1:{self.port}/gateway/status",
            headers={"Authorization": f"Bearer {key}"},
            timeout=10,
        )
        assert reply.status_code == 200, reply.text
        return reply.json()


def wait_for(check: Callable[[], object], what: str, timeout: float = 60.0) -> object:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        time.sleep(0.5)


def build_prometheus_image() -> None:
    done = subprocess.run(
        ["bash", str(REPO / "images/prometheus/build.sh"), "--no-base-build"],
        env={**os.environ, "PROMETHEUS_IMAGE_TAG": PROMETHEUS_IMAGE},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def stack(docker_client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObsStack]:
    build_prometheus_image()
    tmp = tmp_path_factory.mktemp("obs")
    project = f"{os.environ.get('TEST_PROJECT_PREFIX', 'vct')}obs{os.urandom(4).hex()}"
    port, prom_port = free_port(), free_port()
    while prom_port == port:
        prom_port = free_port()
    stack_file = tmp / "stack.toml"
    stack_file.write_text(
        f'[stack]\nproject = "{project}"\nport = {port}\n'
        '[stack.env]\nSIM_LOAD_SECONDS = "0.3"\nSIM_TIME_SCALE = "20"\n'
        f'[gateway]\nprometheus_port = {prom_port}\nprometheus_image = "{PROMETHEUS_IMAGE}"\n',
        encoding="utf-8",
    )
    env = isolated_env(tmp)
    env.pop("PROMETHEUS_IMAGE", None)
    env.pop("PROMETHEUS_PORT", None)
    obs = ObsStack(project, port, prom_port, env, stack_file)
    try:
        done = obs.run("up", "baseline", "--with", "prometheus")
        assert done.returncode == 0, done.stdout + done.stderr
        yield obs
    finally:
        obs.run("down", timeout=120)
        remove_project(docker_client, project)
        for volume in docker_client.volumes.list(filters={"label": f"com.docker.compose.project={project}"}):
            volume.remove(force=True)


def _prometheus_container(docker_client, project: str):
    found = docker_client.containers.list(
        filters={"label": [f"com.docker.compose.project={project}", f"{label_names.ROLE}=prometheus"]}
    )
    assert len(found) == 1, found
    return found[0]


def test_prometheus_runs_on_loopback_without_the_key(stack: ObsStack, docker_client) -> None:
    container = _prometheus_container(docker_client, stack.project)
    bindings = container.attrs["HostConfig"]["PortBindings"]["9090/tcp"]
    assert bindings == [{"HostIp": "127.0.0.1", "HostPort": str(stack.prom_port)}]
    key = stack.env["VLLM_API_KEY"]
    assert not any(key in entry for entry in container.attrs["Config"]["Env"])
    config = container.exec_run(["cat", "/etc/prometheus/prometheus.yml"])
    assert config.exit_code == 0 and b"/gateway/metrics" in config.output
    assert key.encode() not in config.output


def test_prometheus_scrapes_the_gateway_and_the_variant(stack: ObsStack) -> None:
    def targets_up() -> dict[str, str] | None:
        reply = httpx.get(f"{stack.prometheus}/api/v1/targets", params={"state": "active"}, timeout=10)
        jobs = {t["labels"]["job"]: t["health"] for t in reply.json()["data"]["activeTargets"]}
        return jobs if set(jobs.values()) == {"up"} and len(jobs) == 2 else None

    jobs = wait_for(targets_up, "both targets up")
    assert jobs == {"vllm-composer-gateway": "up", "vllm": "up"}
    ready = wait_for(lambda: stack.query("gateway_backend_ready == 1"), "a gateway series")
    assert ready[0]["metric"]["job"] == "vllm-composer-gateway"
    assert ready[0]["metric"]["stack"] == stack.project
    assert wait_for(lambda: stack.query('vllm:num_requests_running{job="vllm"}'), "a vLLM series")


def test_the_switch_history_survives_a_gateway_restart(stack: ObsStack, docker_client) -> None:
    done = stack.run("up", "mtp")
    assert done.returncode == 0, done.stdout + done.stderr
    before = stack.status()["switches"]
    assert before and before[0]["to"] == "mtp" and before[0]["outcome"] == "ok"
    gateway = docker_client.containers.get(f"{stack.project}-gateway-1")
    started = gateway.attrs["State"]["StartedAt"]
    gateway.restart(timeout=10)
    gateway.reload()
    assert gateway.attrs["State"]["StartedAt"] != started
    after = wait_for(lambda: stack.status()["switches"], "the status after the restart")
    assert after[0] == before[0]
    assert json.dumps(after).count('"to": "mtp"') >= 1


def test_down_removes_prometheus_too(stack: ObsStack, docker_client) -> None:
    done = stack.run("down")
    assert done.returncode == 0, done.stdout + done.stderr
    left = docker_client.containers.list(
        all=True, filters={"label": f"com.docker.compose.project={stack.project}"}
    )
    assert left == []
