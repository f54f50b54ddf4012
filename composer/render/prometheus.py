"""PrometheusSpec: the optional observability profile of a compose stack (pure data, no I/O).

A `prometheus` service under the compose profile `prometheus` (`up VARIANT --with prometheus`)
that scrapes the gateway's `/gateway/metrics` and vLLM's `/metrics` (on a live set, of every
live container) inside the project's network. It gets no API key: neither path needs one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from composer import labels as label_names
from composer.render.follow import PROFILE as FOLLOW_PROFILE
from composer.render.follow import SERVICE as FOLLOW_SERVICE
from composer.render.gateway import SERVICE as GATEWAY_SERVICE
from composer.render.spec import CONTAINER_PORT, Text, Var, text
from composer.stack.model import Stack

SERVICE = "prometheus"
PROFILE = "prometheus"
CONFIG_NAME = "prometheus-config"
CONFIG_TARGET = "/etc/prometheus/prometheus.yml"
VOLUME = "prometheus-data"
DATA_DIR = "/prometheus"
CONTAINER_PORT_PROMETHEUS = 9090
GATEWAY_JOB = "vllm-composer-gateway"  # the dashboard's default `Gateway job`
VLLM_JOB = "vllm"
SCRAPE_INTERVAL = "5s"
RETENTION = "15d"
# The compose profiles `up --with` starts, and their service.
PROFILE_SERVICES = {PROFILE: SERVICE, FOLLOW_PROFILE: FOLLOW_SERVICE}
HEALTH_PROBE = ("CMD", "promtool", "check", "healthy", f"--url=http://127.0.0.1:{CONTAINER_PORT_PROMETHEUS}")


@dataclass(frozen=True)
class PrometheusSpec:
    """The Prometheus service of the observability profile, for the compose renderer."""

    image: Text
    published_port: Text
    host_ip: Text
    config: str
    service: str = SERVICE
    profile: str = PROFILE
    container_port: int = CONTAINER_PORT_PROMETHEUS
    command: tuple[str, ...] = (
        f"--config.file={CONFIG_TARGET}",
        f"--storage.tsdb.path={DATA_DIR}",
        f"--storage.tsdb.retention.time={RETENTION}",
        f"--web.listen-address=0.0.0.0:{CONTAINER_PORT_PROMETHEUS}",
    )
    config_name: str = CONFIG_NAME
    config_target: str = CONFIG_TARGET
    volume: str = VOLUME
    data_dir: str = DATA_DIR
    labels: tuple[tuple[str, str], ...] = ((label_names.ROLE, label_names.ROLE_PROMETHEUS),)
    healthcheck: tuple[str, ...] = HEALTH_PROBE


def scrape_config(stack: Stack, live: Sequence[tuple[str, str, str]] = ()) -> str:
    """Prometheus' configuration: the gateway and the serving variant, or every `live` container."""
    jobs: list[tuple[str, str, list[tuple[str, dict[str, str]]]]] = []
    if stack.gateway.enabled:
        jobs.append((GATEWAY_JOB, "/gateway/metrics", [(f"{GATEWAY_SERVICE}:{CONTAINER_PORT}", {})]))
    members = [
        (f"{service}:{CONTAINER_PORT}", {"upstream": name, "variant": variant})
        for name, variant, service in live
    ]
    jobs.append((VLLM_JOB, "/metrics", members or [(f"{stack.service}:{CONTAINER_PORT}", {})]))
    what = "every live container" if live else "the serving variant"
    lines = [
        f"# Rendered by compose-spec: the gateway and {what}, inside the project's network.",
        "global:",
        f"  scrape_interval: {SCRAPE_INTERVAL}",
        "  evaluation_interval: 15s",
        "scrape_configs:",
    ]
    for job, path, targets in jobs:
        lines += [f"  - job_name: {job}", f"    metrics_path: {path}", "    static_configs:"]
        for address, extra in targets:
            lines += [f"      - targets: [{json.dumps(address)}]", "        labels:"]
            labels = {"stack": stack.project, **extra}
            lines += [f"          {key}: {json.dumps(value)}" for key, value in labels.items()]
    return "\n".join(lines) + "\n"


def build_prometheus_spec(stack: Stack, live: Sequence[tuple[str, str, str]] = ()) -> PrometheusSpec:
    """The observability profile's Prometheus (`live`: see `scrape_config`)."""
    return PrometheusSpec(
        image=text(Var("PROMETHEUS_IMAGE", stack.gateway.prometheus_image)),
        published_port=text(Var("PROMETHEUS_PORT", str(stack.gateway.prometheus_port))),
        host_ip=text(Var("PROMETHEUS_BIND_ADDRESS", stack.bind_address)),
        config=scrape_config(stack, live),
    )
