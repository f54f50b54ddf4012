"""A real Prometheus (Debian's `prometheus`) on 127.0.0.1, started with the committed scrape
configuration pointed at a test gateway, and the dashboard's expressions made concrete."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import yaml

from tests.conftest import free_port

from .test_dashboard_model import DASHBOARD, expressions

CONFIG = Path(__file__).resolve().parents[2] / "observability" / "prometheus.yml"
PROMETHEUS = shutil.which("prometheus")


def scrape_config(gateway_port: int) -> dict:
    """The committed configuration, pointed at the test gateway and scraping every second."""
    config = yaml.safe_load(CONFIG.read_text())
    config["global"]["scrape_interval"] = "1s"
    for job in config["scrape_configs"]:
        for static in job["static_configs"]:
            static["targets"] = [
                t.replace("127.0.0.1:8000", f"127.0.0.1:{gateway_port}") for t in static["targets"]
            ]
    return config


class Prometheus:
    def __init__(self, config: dict, workdir: Path) -> None:
        self.port = free_port()
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = open(workdir / "prometheus.log", "w")  # noqa: SIM115 - the child's lifetime
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while not self._ready():
            assert self.proc.poll() is None, (workdir / "prometheus.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def query(self, expr: str) -> list[dict]:
        reply = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = reply.json()
        assert reply.status_code == 200 and body["status"] == "success", (expr, body)
        return body["data"]["result"]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def wait_until(prom: Prometheus, expr: str, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while not prom.query(expr):
        assert time.monotonic() < deadline, f"{expr} returned nothing within {timeout:g}s"
        time.sleep(0.5)


def scraped_since(prom: Prometheus, job: str, since: float) -> bool:
    """True when every target of `job` was scraped successfully after epoch second `since`."""
    reply = httpx.get(f"{prom.url}/api/v1/targets", params={"state": "active"}, timeout=10)
    targets = [t for t in reply.json()["data"]["activeTargets"] if t["labels"].get("job") == job]
    return bool(targets) and all(t["health"] == "up" and _epoch(t["lastScrape"]) > since for t in targets)


def _epoch(stamp: str) -> float:
    """Prometheus' RFC 3339 time (nanoseconds, `Z` or an offset) as epoch seconds."""
    main, _, rest = stamp.partition(".")
    digits = "".join(itertools.takewhile(str.isdigit, rest))
    zone = rest[len(digits) :] or "Z"
    base = datetime.fromisoformat(main + ("+00:00" if zone == "Z" else zone))
    return base.timestamp() + (float(f"0.{digits}") if digits else 0.0)


def wait_for_scrape(prom: Prometheus, job: str, since: float, timeout: float = 40.0) -> None:
    """Wait until Prometheus scraped `job` after `since` (epoch seconds): what happened before
    `since` is then in its data."""
    deadline = time.monotonic() + timeout
    while not scraped_since(prom, job, since):
        assert time.monotonic() < deadline, f"no scrape of {job} within {timeout:g}s"
        time.sleep(0.2)


def dashboard_queries(model: str) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) of every dashboard query, its variables replaced for `model`."""
    values = {
        "$__rate_interval": "15s",
        "$__range": "5m",
        "$model": model,
        "$gateway": "vllm-composer-gateway",
    }
    for title, expr in expressions(json.loads(DASHBOARD.read_text())):
        for var, value in values.items():
            expr = expr.replace(var, value)
        yield title, expr
