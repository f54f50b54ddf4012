"""Run the simulator as a local subprocess and talk to it over HTTP (stdlib only)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SIM_SRC = Path(__file__).resolve().parents[2] / "images" / "sim" / "src"
SIM_MODEL = Path(__file__).resolve().parents[2] / "images" / "sim" / "models" / "Qwen3.8-27B"
FAST_ENV = {"SIM_TIME_SCALE": "50", "SIM_LOAD_SECONDS": "0.2"}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sim_env(extra: Mapping[str, str] | None = None, src: Path = SIM_SRC) -> dict[str, str]:
    """Environment for a simulator process: clean of SIM_/VLLM_ variables from the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIM_", "VLLM_"))}
    env["PYTHONPATH"] = str(src)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(FAST_ENV)
    env.update(extra or {})
    return env


def run_sim(
    args: Sequence[str], env: Mapping[str, str] | None = None, src: Path = SIM_SRC, timeout: float = 20
) -> subprocess.CompletedProcess[str]:
    """Run `vllm serve ARGS` to completion (for failures); stdout and stderr merged."""
    return subprocess.run(
        [sys.executable, "-m", "vllm", "serve", *args],
        env=sim_env(env, src),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=timeout,
        check=False,
    )


@dataclass
class SimProcess:
    """A running simulator."""

    proc: subprocess.Popen[str]
    port: int
    api_key: str | None = None
    log_path: Path | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
        src: Path = SIM_SRC,
        api_key: str | None = None,
        log_dir: Path | None = None,
    ) -> SimProcess:
        port = free_port()
        argv = [sys.executable, "-m", "vllm", "serve", *args, "--port", str(port), "--host", "127.0.0.1"]
        if api_key:
            argv += ["--api-key", api_key]
        log_path = (log_dir or Path("/tmp")) / f"sim-{port}.log"
        handle = open(log_path, "w")  # noqa: SIM115 - kept open for the child's lifetime
        proc = subprocess.Popen(
            argv, env=sim_env(env, src), stdout=handle, stderr=subprocess.STDOUT, text=True
        )
        return cls(proc, port, api_key, log_path)

    def output(self) -> str:
        return self.log_path.read_text() if self.log_path else ""

    def listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def wait_ready(self, timeout: float = 15) -> SimProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"simulator exited {self.proc.returncode}:\n{self.output()}")
            try:
                if self.request("GET", "/health")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"simulator not ready after {timeout}s:\n{self.output()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def request(
        self, method: str, path: str, body: Any = None, key: str | None = None, timeout: float = 30
    ) -> tuple[int, bytes]:
        """One HTTP request; ``key`` defaults to the server's API key."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {"content-type": "application/json"}
        token = key if key is not None else self.api_key
        if token:
            headers["authorization"] = f"Bearer {token}"
        data = json.dumps(body).encode() if body is not None else None
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def json(self, method: str, path: str, body: Any = None) -> Any:
        status, raw = self.request(method, path, body)
        assert status == 200, (status, raw)
        return json.loads(raw)

    def stream(
        self, path: str, body: dict[str, Any], on_event: Callable[[int], object] | None = None
    ) -> tuple[list[Any], list[float], Any]:
        """POST with stream=true; returns (events, arrival times, response headers).

        ``on_event(n)`` is called after the n-th event arrived (1-based).
        """
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        conn.request("POST", path, body=json.dumps({**body, "stream": True}), headers=headers)
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        events: list[Any] = []
        times: list[float] = []
        try:
            while True:
                line = resp.readline()
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                times.append(time.monotonic())
                payload = line[len(b"data: ") :]
                events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
                if on_event is not None:
                    on_event(len(events))
        finally:
            conn.close()
        return events, times, resp.headers

    def metrics(self) -> dict[str, float]:
        """Samples of /metrics keyed by the full sample name with labels."""
        status, raw = self.request("GET", "/metrics")
        assert status == 200
        samples: dict[str, float] = {}
        for line in raw.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                samples[name] = float(value)
        return samples


def metric(samples: Mapping[str, float], name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    found = False
    for key, value in samples.items():
        base = key.split("{", 1)[0]
        if base != name:
            continue
        if all(f'{k}="{v}"' in key for k, v in labels.items()):
            total += value
            found = True
    if not found:
        raise KeyError(name)
    return total


@contextmanager
def serving(
    spec: Mapping[str, Any] | None,
    *,
    api_key: str,
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 30,
) -> Iterator[str]:
    """The simulator serving the reference model as `m` (with `spec` as its speculative
    config, if any) on a free loopback port; yields its base URL and stops it after."""
    args = [str(SIM_MODEL), "--served-model-name", "m"]
    if spec is not None:
        args += ["--speculative-config", json.dumps(spec)]
    sim = SimProcess.start(args, env=env, api_key=api_key, log_dir=log_dir)
    try:
        sim.wait_ready(timeout)
        yield f"http://127.0.0.1:{sim.port}"
    finally:
        sim.stop()
