"""A real compose stack on the simulator for the observability tests: `compose-spec` run as a
subprocess (the CLI a user runs) against the repository's composer.toml plus a small stack
file of the test's own (project, port, Prometheus port), with $GATEWAY_IMAGE and
$PROMETHEUS_IMAGE when set. Torn down with its containers, networks and volumes."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from composer import __version__
from tests.conftest import REPO, StackCli, free_port, isolated_env, remove_project

PROMETHEUS_IMAGE = os.environ.get("PROMETHEUS_IMAGE") or f"vllm-composer-prometheus:{__version__}"
SERVED = "claude-opus-5"  # composer.toml's served model name


@dataclass
class ComposeStack(StackCli):
    project: str
    port: int
    prom_port: int
    env: dict[str, str]
    stack_file: Path
    completed: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _load: threading.Thread | None = None

    run_timeout = 180

    @property
    def key(self) -> str:
        return self.env["VLLM_API_KEY"]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def prometheus(self) -> str:
        return f"http://127.0.0.1:{self.prom_port}"

    def query(self, expr: str) -> list[dict]:
        reply = httpx.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=10)
        assert reply.status_code == 200, reply.text
        return reply.json()["data"]["result"]

    def status(self) -> dict:
        reply = httpx.get(
            f"{self.url}/gateway/status", headers={"Authorization": f"Bearer {self.key}"}, timeout=10
        )
        assert reply.status_code == 200, reply.text
        return reply.json()

    def start_load(self) -> None:
        """Completions through the gateway, one after another, until `stop_load()`."""

        def run() -> None:
            body = {"model": SERVED, "prompt": "Count slowly.", "max_tokens": 48, "ignore_eos": True}
            with httpx.Client(headers={"Authorization": f"Bearer {self.key}"}, timeout=60) as http:
                while not self._stop.is_set():
                    try:
                        if http.post(f"{self.url}/v1/completions", json=body).status_code == 200:
                            self.completed += 1
                    except httpx.HTTPError:
                        time.sleep(0.1)

        self._load = threading.Thread(target=run, name="compose-load", daemon=True)
        self._load.start()

    def stop_load(self) -> None:
        self._stop.set()
        if self._load is not None:
            self._load.join(timeout=30)


def wait_for(check: Callable[[], object], what: str, timeout: float = 60.0) -> object:
    """Poll `check()` until truthy (an HTTP error counts as not yet), bounded by `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        time.sleep(0.2)


def build_prometheus_image() -> None:
    """images/prometheus/build.sh for $PROMETHEUS_IMAGE (a no-op when it is current)."""
    done = subprocess.run(
        ["bash", str(REPO / "images/prometheus/build.sh"), "--no-base-build"],
        env={**os.environ, "PROMETHEUS_IMAGE_TAG": PROMETHEUS_IMAGE},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@contextmanager
def compose_stack(docker_client, workdir: Path, name: str, stack_env: str = "") -> Iterator[ComposeStack]:
    """A stack of its own (project, ports, state and key) under `workdir`; removed at the end."""
    project = f"{os.environ.get('TEST_PROJECT_PREFIX', 'vct')}{name}{os.urandom(4).hex()}"
    port = free_port()
    prom_port = free_port()
    while prom_port == port:
        prom_port = free_port()
    stack_file = workdir / "stack.toml"
    stack_file.write_text(
        f'[stack]\nproject = "{project}"\nport = {port}\nprobation = "0s"\n'
        f'[stack.env]\nSIM_TIME_SCALE = "20"\n{stack_env}'
        f'[gateway]\nprometheus_port = {prom_port}\nprometheus_image = "{PROMETHEUS_IMAGE}"\n',
        encoding="utf-8",
    )
    env = isolated_env(workdir)
    for var in ("PROMETHEUS_IMAGE", "PROMETHEUS_PORT", "PROMETHEUS_BIND_ADDRESS"):
        env.pop(var, None)
    stack = ComposeStack(project, port, prom_port, env, stack_file)
    try:
        yield stack
    finally:
        stack.stop_load()
        stack.run("down", timeout=120)
        remove_project(docker_client, project)
