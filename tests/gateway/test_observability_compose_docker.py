"""The observability profile on a real compose stack (simulator): `compose-spec up baseline
--with prometheus` starts the rendered Prometheus beside the gateway; through its HTTP API
the gateway's and the variant's targets are up and a gateway series exists. Then a switch
to mtp, and the gateway's switch history survives a restart of its container."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from composer import labels as label_names

from .composelab import ComposeStack, build_prometheus_image, compose_stack, wait_for

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def stack(docker_client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeStack]:
    build_prometheus_image()
    with compose_stack(
        docker_client, tmp_path_factory.mktemp("obs"), "obs", 'SIM_LOAD_SECONDS = "0.3"\n'
    ) as obs:
        done = obs.run("up", "baseline", "--with", "prometheus")
        assert done.returncode == 0, done.stdout + done.stderr
        yield obs


def _prometheus_container(docker_client, project: str):
    found = docker_client.containers.list(
        filters={"label": [f"com.docker.compose.project={project}", f"{label_names.ROLE}=prometheus"]}
    )
    assert len(found) == 1, found
    return found[0]


def test_prometheus_runs_on_loopback_without_the_key(stack: ComposeStack, docker_client) -> None:
    container = _prometheus_container(docker_client, stack.project)
    bindings = container.attrs["HostConfig"]["PortBindings"]["9090/tcp"]
    assert bindings == [{"HostIp": "127.0.0.1", "HostPort": str(stack.prom_port)}]
    key = stack.env["VLLM_API_KEY"]
    assert not any(key in entry for entry in container.attrs["Config"]["Env"])
    config = container.exec_run(["cat", "/etc/prometheus/prometheus.yml"])
    assert config.exit_code == 0 and b"/gateway/metrics" in config.output
    assert key.encode() not in config.output


def test_prometheus_scrapes_the_gateway_and_the_variant(stack: ComposeStack) -> None:
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


def test_the_switch_history_survives_a_gateway_restart(stack: ComposeStack, docker_client) -> None:
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


def test_down_removes_prometheus_too(stack: ComposeStack, docker_client) -> None:
    done = stack.run("down")
    assert done.returncode == 0, done.stdout + done.stderr
    left = docker_client.containers.list(
        all=True, filters={"label": f"com.docker.compose.project={stack.project}"}
    )
    assert left == []
