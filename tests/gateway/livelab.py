"""Live-set test kit: simulator processes as upstreams, a live gateway, and client groups."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from composer.gateway.config import LiveSpec
from composer.gateway.routing.policy import parse_workloads
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
    sent: float = 0.0  # time.monotonic() when it was sent


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
    sent = time.monotonic()
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
        return Outcome(resp.status, served, ok, sent)
    except (OSError, http.client.HTTPException):
        return Outcome(0, "", False, sent)
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


# -- streams compared token for token (stream continuation) ---------------------------------

COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"
MAX_TOKENS = 320


@dataclass
class Client:
    """One streamed request in a thread: what arrived, event by event."""

    port: int
    path: str
    body: dict[str, Any]
    key: str = KEY
    status: int = 0
    served_by: str = ""
    events: list[Any] = field(default_factory=list)
    raw: str = ""
    thread: threading.Thread | None = None

    def _run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request(
                "POST",
                self.path,
                body=json.dumps(self.body),
                headers={"content-type": "application/json", "authorization": f"Bearer {self.key}"},
            )
            resp = conn.getresponse()
            self.status, self.served_by = resp.status, resp.getheader("x-served-by") or ""
            while line := resp.readline():
                self.raw += line.decode()
                if line.startswith(b"data: "):
                    payload = line[6:].strip()
                    self.events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
        except (OSError, http.client.HTTPException):
            pass
        finally:
            conn.close()

    def start(self) -> Client:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def wait_events(self, count: int) -> None:
        """Wait until `count` events arrived (the timeout only bounds a failing test)."""
        deadline = time.monotonic() + 30
        while len(self.events) < count:
            assert time.monotonic() < deadline, self.raw[-300:]
            time.sleep(0.005)

    def join(self) -> Client:
        assert self.thread is not None
        self.thread.join(timeout=120)
        return self

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return [e for e in self.events if isinstance(e, dict)]

    def ids(self) -> list[int]:
        return [i for c in self.chunks for ch in c.get("choices", []) for i in ch.get("token_ids") or []]

    def text(self) -> str:
        pieces = []
        for chunk in self.chunks:
            for choice in chunk.get("choices", []):
                delta = choice.get("delta")
                pieces.append(choice.get("text", "") if delta is None else delta.get("content") or "")
        return "".join(pieces)

    def usage(self) -> dict[str, int] | None:
        found = [c["usage"] for c in self.chunks if c.get("usage")]
        return found[-1] if found else None


def body(i: int, chat: bool, ids: bool = False, model: str = "m", **extra: Any) -> dict[str, Any]:
    """A greedy stream of MAX_TOKENS tokens, different for each `i`."""
    request: dict[str, Any] = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }
    if chat:
        request["messages"] = [{"role": "user", "content": f"tell story number {i} " * 20}]
    else:
        request["prompt"] = [1000 + i] * 100
    if ids:
        request["return_token_ids"] = True
    return request


def references(
    port: int, path: str | Sequence[str], requests: list[dict[str, Any]], key: str = KEY
) -> list[tuple[list[int], str, int]]:
    """Ids, text and prompt tokens of uninterrupted runs, all at once (a simulator's own port,
    or a gateway's while nothing breaks); `path`: one for all, or each request's."""
    paths = [path] * len(requests) if isinstance(path, str) else list(path)
    runs = [
        Client(port, p, {**r, "return_token_ids": True}, key).start()
        for p, r in zip(paths, requests, strict=True)
    ]
    found = []
    for run in runs:
        run.join()
        usage = run.usage()
        assert run.status == 200 and run.events[-1] == "[DONE]" and usage is not None, run.raw[-300:]
        found.append((run.ids(), run.text(), usage["prompt_tokens"]))
    return found


def samples(url: str) -> dict[str, float]:
    """The gateway's metric samples, by name with labels."""
    text = httpx.get(url + "/gateway/metrics", timeout=10).text
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def check_continued(client: Client, ref: tuple[list[int], str, int]) -> None:
    """One stream, as the client saw it, equals the uninterrupted run."""
    ids, text, prompt_tokens = ref
    assert client.status == 200 and client.events[-1] == "[DONE]", client.raw[-500:]
    assert not any("error" in c for c in client.chunks), client.raw[-500:]
    assert len({c["id"] for c in client.chunks}) == 1
    assert len({(c["created"], c["model"], c["object"]) for c in client.chunks}) == 1
    assert client.text() == text
    assert client.usage() == {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + MAX_TOKENS,
        "completion_tokens": MAX_TOKENS,
    }
    if client.body.get("return_token_ids"):
        assert client.ids() == ids and len(ids) == MAX_TOKENS
        assert any("prompt_token_ids" in c or "prompt_token_ids" in str(c["choices"]) for c in client.chunks)
    else:
        assert "token_ids" not in client.raw


def kill_mid_stream(
    clients: list[Client],
    kill: Callable[[], object],
    name: str = "mtp/1",
    freeze: subprocess.Popen[Any] | None = None,
) -> list[Client]:
    """Run `kill` once every stream has its answer's head and at least two streams the member
    `name` serves have begun; returns the streams it served. `freeze`: the member's process,
    stopped (SIGSTOP) the moment they have begun and continued once `kill` returned, so none
    of its streams can end before `kill`, however slowly this test runs."""
    deadline = time.monotonic() + 60
    while True:
        on_it = [c for c in clients if c.served_by == name]
        begun = all(c.served_by for c in clients) and all(len(c.events) >= 5 for c in on_it)
        if begun and len(on_it) >= 2:
            break
        assert time.monotonic() < deadline, [(c.served_by, len(c.events)) for c in clients]
        time.sleep(0.005)
    if freeze is not None:
        freeze.send_signal(signal.SIGSTOP)
    try:
        kill()
    finally:
        if freeze is not None and freeze.poll() is None:
            freeze.send_signal(signal.SIGCONT)
    return on_it
