"""Containers for the gateway's Docker tests and benchmark: a private network, the gateway, simulators.

Everything created here is named `vctgw-...` and labelled `vct-gateway.lab=<id>`, and removed by that label.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from composer import __version__
from tests.conftest import free_port, remove_containers, remove_networks

REPO = Path(__file__).resolve().parents[2]
# The tag images/gateway/build.sh builds: $GATEWAY_IMAGE, else the toolkit's version.
GATEWAY_IMAGE = os.environ.get("GATEWAY_IMAGE") or f"vllm-composer-gateway:{__version__}"
SIM_IMAGE = "vllm-sim:latest"
LAB_LABEL = "vct-gateway.lab"
SERVED = "qwen"
KEY = "lab-key-not-secret"
SIM_ENV = {"SIM_TIME_SCALE": "100", "SIM_LOAD_SECONDS": "1.0", "VLLM_API_KEY": KEY}


def build_gateway_image() -> str:
    """Run images/gateway/build.sh (a no-op when the image is current); return its output."""
    done = subprocess.run(
        ["bash", str(REPO / "images/gateway/build.sh")],
        env={**os.environ, "GATEWAY_IMAGE_TAG": GATEWAY_IMAGE},
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def host_port(low: int = 18300, high: int = 18399) -> int:
    """A free 127.0.0.1 port in this lab's range (in TEST_PORT_RANGE when that is set)."""
    return free_port(None if os.environ.get("TEST_PORT_RANGE") else (low, high))


@dataclass
class Lab:
    """A private network with a gateway in front of simulator containers."""

    docker: Any
    lab_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    port: int = 0
    network: Any = None
    gateway: Any = None
    sims: list[Any] = field(default_factory=list)

    @property
    def labels(self) -> dict[str, str]:
        return {LAB_LABEL: self.lab_id}

    def start(self, gateway_env: dict[str, str] | None = None, sim_alias: str = "vllm") -> Lab:
        self.network = self.docker.networks.create(f"vctgw-net-{self.lab_id}", labels=self.labels)
        self.port = host_port()
        env = {
            "GATEWAY_UPSTREAM": f"http://{sim_alias}:8000",
            "GATEWAY_SERVED_NAME": SERVED,
            "VLLM_API_KEY": KEY,
            **(gateway_env or {}),
        }
        self.gateway = self.docker.containers.run(
            GATEWAY_IMAGE,
            name=f"vctgw-gw-{self.lab_id}",
            detach=True,
            labels=self.labels,
            environment=env,
            network=self.network.name,
            ports={"8000/tcp": ("127.0.0.1", self.port)},
        )
        return self

    def start_sim(
        self,
        name: str,
        alias: str = "vllm",
        env: dict[str, str] | None = None,
        publish: int | None = None,
        args: tuple[str, ...] = (),
    ) -> Any:
        """A simulator on the lab network under `alias` (published on 127.0.0.1:`publish` if given),
        with `args` after the served name (e.g. `--enable-sleep-mode`)."""
        ports = {"8000/tcp": ("127.0.0.1", publish)} if publish else None
        container = self.docker.containers.create(
            SIM_IMAGE,
            command=["Qwen3.8-27B", "--served-model-name", SERVED, *args],
            name=f"vctgw-sim-{name}-{self.lab_id}",
            detach=True,
            labels=self.labels,
            environment={**SIM_ENV, **(env or {})},
            ports=ports,
        )
        self.network.connect(container, aliases=[alias])
        container.start()
        self.sims.append(container)
        return container

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_gateway(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/gateway/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        raise AssertionError("gateway did not answer: " + self.gateway.logs().decode()[-2000:])

    def cleanup(self) -> None:
        remove_containers(self.docker, {"label": f"{LAB_LABEL}={self.lab_id}"})
        remove_networks(self.docker, {"label": f"{LAB_LABEL}={self.lab_id}"})


@dataclass
class Outcome:
    """One client request as the client saw it."""

    status: int = 0
    done: bool = False
    error: str = ""
    ttfb: float = 0.0
    started_at: float = 0.0


def chat_body(max_tokens: int = 200) -> dict[str, Any]:
    return {
        "model": SERVED,
        "messages": [{"role": "user", "content": "Write about gateways."}],
        "stream": True,
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }


def stream_once(client: httpx.Client, url: str, max_tokens: int = 200) -> Outcome:
    out = Outcome(started_at=time.monotonic())
    try:
        with client.stream(
            "POST",
            url + "/v1/chat/completions",
            json=chat_body(max_tokens),
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=httpx.Timeout(60, connect=5),
        ) as r:
            out.status = r.status_code
            tail = b""
            for chunk in r.iter_raw():
                if not out.ttfb:
                    out.ttfb = time.monotonic() - out.started_at
                tail = (tail + chunk)[-64:]
            out.done = tail.endswith(b"data: [DONE]\n\n")
    except httpx.HTTPError as err:
        out.error = f"{type(err).__name__}: {err}"
    return out


class Load:
    """N clients streaming in a loop until stopped."""

    def __init__(self, url: str, clients: int = 8, max_tokens: int = 200) -> None:
        self.url = url
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(max_tokens,), daemon=True) for _ in range(clients)
        ]

    def _run(self, max_tokens: int) -> None:
        with httpx.Client() as client:
            while not self._stop.is_set():
                out = stream_once(client, self.url, max_tokens)
                with self._lock:
                    self.outcomes.append(out)

    def start(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> list[Outcome]:
        self._stop.set()
        for t in self._threads:
            t.join(90)
        return self.outcomes


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    ok = [o for o in outcomes if o.status == 200 and o.done]
    refused = [o for o in outcomes if o.status and o.status != 200]
    no_answer = [o for o in outcomes if not o.status]
    cut = [o for o in outcomes if o.status == 200 and not o.done]
    return {
        "requests": len(outcomes),
        "ok": len(ok),
        "refused": len(refused),
        "no_answer": len(no_answer),
        "cut": len(cut),
        "longest_ttfb_s": round(max((o.ttfb for o in outcomes), default=0.0), 3),
        "errors": sorted({o.error for o in outcomes if o.error} | {str(o.status) for o in refused})[:5],
    }


def dumps(d: dict[str, Any]) -> str:
    return json.dumps(d, sort_keys=True)
