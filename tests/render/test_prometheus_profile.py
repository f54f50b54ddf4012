"""The observability profile in the rendered compose files: a `prometheus` service under the
compose profile `prometheus`, so the default `docker compose up` never starts it; it binds
the stack's address, scrapes the gateway and the variant by service name, and gets no key."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from composer.render import render_variant, resolve_target
from composer.render.prometheus import scrape_config
from tests.conftest import REPO

COMMITTED = REPO / "compose"


@pytest.mark.parametrize("variant", ["baseline", "mtp", "dflash2"])
def test_only_the_prometheus_service_has_a_profile(variant: str) -> None:
    document = yaml.safe_load((COMMITTED / f"{variant}.yml").read_text())
    profiled = {name: svc["profiles"] for name, svc in document["services"].items() if "profiles" in svc}
    assert profiled == {"prometheus": ["prometheus"], "follow": ["follow"]}
    prom = document["services"]["prometheus"]
    assert "environment" not in prom  # no API key, nothing from the host's environment
    assert prom["ports"][0]["host_ip"] == "${PROMETHEUS_BIND_ADDRESS:-127.0.0.1}"
    assert prom["ports"][0]["published"] == "${PROMETHEUS_PORT:-9090}"
    assert prom["configs"] == [{"source": "prometheus-config", "target": "/etc/prometheus/prometheus.yml"}]
    config = yaml.safe_load(document["configs"]["prometheus-config"]["content"])
    jobs = {
        job["job_name"]: (job["metrics_path"], job["static_configs"][0]["targets"])
        for job in config["scrape_configs"]
    }
    assert jobs == {
        "vllm-composer-gateway": ("/gateway/metrics", ["gateway:8000"]),
        "vllm": ("/metrics", ["vllm:8000"]),
    }


def test_the_default_compose_run_leaves_prometheus_out() -> None:
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode:
        pytest.skip("the docker compose CLI is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "PROMETHEUS_"))}
    env["VLLM_API_KEY"] = "k" * 32

    def services(*extra: str) -> set[str]:
        argv = [docker, "compose", "-f", str(COMMITTED / "mtp.yml"), *extra, "config", "--services"]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        return set(done.stdout.split())

    assert services() == {"gateway", "gateway-port", "vllm"}
    assert services("--profile", "prometheus") == {"gateway", "gateway-port", "vllm", "prometheus"}


def _stack(*flags: str, key: str = ""):
    from composer.stack.load import load_stack

    return load_stack([REPO / "composer.toml"], env_file=None, environ={"VLLM_API_KEY": key}, flags=flags)


def test_a_stack_without_gateway_scrapes_only_the_variant() -> None:
    stack = _stack("gateway.enabled=false")
    config = yaml.safe_load(scrape_config(stack))
    assert [job["job_name"] for job in config["scrape_configs"]] == ["vllm"]


def test_the_key_never_reaches_the_rendered_profile(tmp_path: Path) -> None:
    stack = _stack("gateway.prometheus_port=9191", key="sekret-" * 6)
    text = "".join(f.content for f in render_variant(resolve_target(stack, "mtp"), tmp_path))
    assert "sekret-" not in text
    assert "${PROMETHEUS_PORT:-9191}" in text
