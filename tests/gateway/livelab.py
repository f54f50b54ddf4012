"""Live-set test kit: simulator processes as upstreams, a live gateway, and client groups."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from composer.gateway.config import LiveSpec
from composer.gateway.policy import parse_workloads
from tests.sim.simproc import SIM_MODEL, SimProcess, sim_env

from .fakes import GatewayThread

KEY = "live-key-123"
MTP = {"method": "mtp", "num_speculative_tokens": 7}
# What `recommend --write` would hand over: chat-1 = mtp, chat-16 = baseline (crossover 4),
# any long prompt = baseline.
WORKLOADS = "chat-1:0:1024:0:1=mtp,chat-16:0:1024:0:16=baseline,long-16:1025:0:0:16=baseline"
CHAT_TOKENS = 100
LONG_TOKENS = 4500


def start_sim(variant: str, log_dir: Path, *, scale: str = "50", port: int | None = None) -> SimProcess:
    """A simulator serving `m` as `variant` (baseline or mtp); on `port` when given."""
    args = [str(SIM_MODEL), "--served-model-name", "m"]
    if variant == "mtp":
        args += ["--speculative-config", json.dumps(MTP)]
    env = {"SIM_TIME_SCALE": scale}
    if port is None:
        return SimProcess.start(args, env=env, api_key=KEY, log_dir=log_dir).wait_ready(30)
    # the same port again (a restarted container keeps its address)
    argv = [sys.executable, "-m", "vllm", "serve", *args, "--port", str(port), "--host", "127.0.0.1"]
    log_path = log_dir / f"sim-{port}-again.log"
    with open(log_path, "w") as handle:
        proc = subprocess.Popen(
            [*argv, "--api-key", KEY], env=sim_env(env), stdout=handle, stderr=subprocess.STDOUT, text=True
        )
    return SimProcess(proc, port, KEY, log_path).wait_ready(30)


def live_gateway(members: Sequence[tuple[str, str, str]], **settings: object) -> GatewayThread:
    """A gateway routing among `(name, variant, url)` members, ready once every member is (a
    request sent before a member's first probe passed would go to another one)."""
    settings.setdefault("workloads", parse_workloads(WORKLOADS))
    gw = GatewayThread(
        "http://127.0.0.1:9",
        api_key=KEY,
        served_name="m",
        live_upstreams=tuple(LiveSpec(*m) for m in members),
        **settings,
    ).start()
    gw.wait(lambda g: all(m.ready for m in g.live.members.values()), timeout=30)
    return gw


@dataclass
class Outcome:
    """What one request got: status (0: no answer), who served it, whether it ended well."""

    status: int
    served_by: str
    ok: bool


def request(
    port: int, prompt_tokens: int, max_tokens: int, *, stream: bool = False, key: str = KEY, model: str = "m"
) -> Outcome:
    """One completion through the gateway on `port`; a stream is ok when `[DONE]` arrived
    without an error event."""
    body = {
        "model": model,
        "prompt": [11] * prompt_tokens,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
    }
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(
            "POST",
            "/v1/completions",
            body=json.dumps(body),
            headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
        )
        resp = conn.getresponse()
        served = resp.getheader("x-served-by") or ""
        data = resp.read()
        ended = b"data: [DONE]" in data and b'"error"' not in data  # no error event either
        ok = resp.status == 200 and (ended if stream else b'"usage"' in data)
        return Outcome(resp.status, served, ok)
    except (OSError, http.client.HTTPException):
        return Outcome(0, "", False)
    finally:
        conn.close()


@dataclass
class Group:
    """A client group: `streams` closed-loop streams sending `requests` requests in all."""

    name: str
    port: int
    prompt_tokens: int
    max_tokens: int
    streams: int
    requests: int
    stream: bool = False
    key: str = KEY
    model: str = "m"
    outcomes: list[Outcome] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def _run(self, left: list[int], lock: threading.Lock) -> None:
        while not self.stop.is_set():
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            got = request(
                self.port,
                self.prompt_tokens,
                self.max_tokens,
                stream=self.stream,
                key=self.key,
                model=self.model,
            )
            with lock:
                self.outcomes.append(got)

    def start(self) -> list[threading.Thread]:
        left, lock = [self.requests], threading.Lock()
        threads = [
            threading.Thread(target=self._run, args=(left, lock), daemon=True) for _ in range(self.streams)
        ]
        for t in threads:
            t.start()
        return threads

    def served(self) -> Counter[str]:
        return Counter(o.served_by for o in self.outcomes)

    def failed(self) -> int:
        return sum(not o.ok for o in self.outcomes)

    def refused(self) -> int:
        return sum(o.status in (429, 503) for o in self.outcomes)


def run_groups(*groups: Group) -> None:
    """Run the groups at once, interleaved, until each has sent its requests."""
    threads = [t for g in groups for t in g.start()]
    for t in threads:
        t.join(timeout=300)
