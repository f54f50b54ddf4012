"""A small stack on 127.0.0.1 for the status tests: two simulator processes (baseline, mtp)
behind an in-process gateway, a load thread, and a switch driven through the control channel
exactly as `compose-spec up` drives it (drain naming the target, route, release reporting)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from composer.gateway.host.client import GatewayControl
from tests.sim.simproc import SimProcess

from .fakes import GatewayThread, LocalExec

MODELS = Path(__file__).resolve().parents[2] / "images" / "sim" / "models"
SERVED = "qwen-status"
KEY = "status-key-5b1f0c"
MTP7 = json.dumps({"method": "mtp", "num_speculative_tokens": 7})


def start_sim(log_dir: Path, *extra: str) -> SimProcess:
    """A simulator serving SERVED (fast timing scale) with the API key."""
    return SimProcess.start(
        [str(MODELS / "Qwen3.8-27B"), "--served-model-name", SERVED, "--max-model-len", "8192", *extra],
        env={"SIM_TIME_SCALE": "20"},
        api_key=KEY,
        log_dir=log_dir,
    ).wait_ready()


class Lab:
    """baseline and mtp simulators, a gateway in front of baseline, and load through it."""

    def __init__(self, log_dir: Path) -> None:
        self.sims = {"baseline": start_sim(log_dir), "mtp": start_sim(log_dir, "-sc", MTP7)}
        self.gateway = GatewayThread(self.url_of("baseline"), api_key=KEY, served_name=SERVED).start()
        self.gateway.wait(lambda g: g.upstream.ready, timeout=10)
        self.control = GatewayControl(LocalExec(self.gateway.config.control_socket))
        self._stop = threading.Event()
        self._load: threading.Thread | None = None
        self.completed = 0

    def url_of(self, variant: str) -> str:
        return f"http://127.0.0.1:{self.sims[variant].port}"

    def report_serving(self, variant: str) -> None:
        self.control.report_serving(variant)

    def status(self, key: str = KEY) -> httpx.Response:
        return httpx.get(f"{self.gateway.url}/gateway/status", headers={"Authorization": f"Bearer {key}"})

    def start_load(self) -> None:
        """Completions through the gateway, one after another, until `close()`."""

        def run() -> None:
            body = {"model": SERVED, "prompt": "Count slowly.", "max_tokens": 48, "ignore_eos": True}
            with httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http:
                while not self._stop.is_set():
                    try:
                        if http.post(f"{self.gateway.url}/v1/completions", json=body).status_code == 200:
                            self.completed += 1
                    except httpx.HTTPError:
                        time.sleep(0.1)

        self._load = threading.Thread(target=run, name="status-load", daemon=True)
        self._load.start()

    @contextmanager
    def switch(self, to: str) -> Iterator[str]:
        """Drain naming `to` and route to it; the block runs before the release reports ok."""
        drained = self.control.drain(10, 60, owner="compose-spec up", target=to)
        self.control.route(self.url_of(to))
        yield drained.hold_id
        self.control.wait_ready(10)
        self.control.release(drained.hold_id, serving=to, ok=True, detail="swapped")

    def close(self) -> None:
        self._stop.set()
        if self._load is not None:
            self._load.join(timeout=30)
        self.gateway.stop()
        for sim in self.sims.values():
            sim.stop()
