"""Timed streaming chat completions against a vLLM server, and acceptance from its /metrics.

On the client's monotonic clock: TTFT is from sending to the first chunk with text; decode
speed is the tokens after the first (`usage.completion_tokens - 1`) over the time from the
first to the last text chunk, so prefill and queueing never dilute it.

Acceptance comes from counter deltas around the measured requests (never absolute values):
rate = accepted / draft tokens; tokens per iteration = 1 + accepted / drafts; at position
i = accepted_per_pos[i] / drafts.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from composer.errors import BenchError


@dataclass(frozen=True)
class StreamResult:
    """What one streamed completion produced and how long it took."""

    text: str
    completion_tokens: int
    prompt_tokens: int
    ttft_s: float
    e2e_s: float
    decode_s: float
    chunks: int

    @property
    def decode_tok_s(self) -> float:
        """Tokens after the first over the time after the first token (0 if undefined)."""
        if self.completion_tokens < 2 or self.decode_s <= 0:
            return 0.0
        return (self.completion_tokens - 1) / self.decode_s


@dataclass(frozen=True)
class ChatRequest:
    """The fixed parts of a benchmark request."""

    model: str
    max_tokens: int

    def body(self, prompt: str) -> dict[str, Any]:
        """Greedy with EOS ignored, so every request decodes all `max_tokens`."""
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "chat_template_kwargs": {"enable_thinking": False},
            "ignore_eos": True,
        }


def sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The payload of each `data:` event, up to `[DONE]` (comments and blanks skipped)."""
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        if payload:
            yield payload


def chunk_text(chunk: dict[str, Any]) -> str:
    """The generated text in one chat (delta.content) or text completion chunk."""
    pieces: list[str] = []
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta")
        if isinstance(delta, dict):
            pieces.append(delta.get("content") or "")
        else:
            pieces.append(choice.get("text") or "")
    return "".join(pieces)


def parse_chunk(payload: str) -> dict[str, Any]:
    """Decode one event payload, or BenchError (an error object is an error too)."""
    try:
        chunk = json.loads(payload)
    except ValueError as err:
        raise BenchError(f"the server sent an event that is not JSON: {payload[:120]!r}") from err
    if not isinstance(chunk, dict):
        raise BenchError(f"the server sent an unexpected event: {payload[:120]!r}")
    if "error" in chunk:
        raise BenchError(f"the server reported an error mid-stream: {chunk['error']}")
    return chunk


class StreamTimer:
    """Accumulates the chunks of one stream with their arrival times."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.first: float | None = None
        self.last: float | None = None
        self.pieces: list[str] = []
        self.usage: dict[str, Any] | None = None
        self.chunks = 0

    def feed(self, chunk: dict[str, Any], now: float) -> None:
        text = chunk_text(chunk)
        if text:
            self.chunks += 1
            self.pieces.append(text)
            if self.first is None:
                self.first = now
            self.last = now
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]

    def result(self, finished: float) -> StreamResult:
        """The timed result; BenchError when no text or no usage arrived."""
        if self.first is None or self.last is None:
            raise BenchError("the stream ended without any generated text")
        if self.usage is None or "completion_tokens" not in self.usage:
            raise BenchError("the stream carried no usage: the server ignored stream_options")
        return StreamResult(
            text="".join(self.pieces),
            completion_tokens=int(self.usage["completion_tokens"]),
            prompt_tokens=int(self.usage.get("prompt_tokens") or 0),
            ttft_s=self.first - self.started,
            e2e_s=finished - self.started,
            decode_s=self.last - self.first,
            chunks=self.chunks,
        )


def stream_chat(client: httpx.Client, request: ChatRequest, prompt: str) -> StreamResult:
    """Send one streaming chat completion and time it (client has base URL and auth)."""
    started = time.perf_counter()
    timer = StreamTimer(started)
    try:
        with client.stream("POST", "/v1/chat/completions", json=request.body(prompt)) as response:
            if response.status_code != 200:
                response.read()
                raise BenchError(
                    f"POST /v1/chat/completions answered {response.status_code}: {response.text[:300]}"
                )
            for payload in sse_data(response.iter_lines()):
                timer.feed(parse_chunk(payload), time.perf_counter())
    except httpx.HTTPError as err:
        raise BenchError(f"the benchmark request failed: {err}") from err
    return timer.result(time.perf_counter())


def make_client(base_url: str, api_key: str | None, timeout: float) -> httpx.Client:
    """An HTTP client for one server (one connection reused across requests)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(base_url=base_url, headers=headers, timeout=httpx.Timeout(timeout, connect=10.0))


def run_streams(
    streams: int,
    stream: Callable[[int], None],
    clients: Sequence[httpx.Client],
    stop: threading.Event,
    name: str,
    abort: Callable[[], None] = lambda: None,
) -> None:
    """Run `stream(s)` in `streams` threads named `name`; on any error (Ctrl-C too) set `stop`
    and call `abort` first. The clients are closed either way (blocked streams end at once)."""
    pool = ThreadPoolExecutor(max_workers=streams, thread_name_prefix=name)
    try:
        for future in [pool.submit(stream, s) for s in range(streams)]:
            future.result()
    except BaseException:
        stop.set()
        abort()
        for client in clients:
            client.close()
        raise
    finally:
        pool.shutdown(wait=not stop.is_set(), cancel_futures=True)
        for client in clients:
            client.close()


DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')

Labels = frozenset[tuple[str, str]]
Samples = dict[tuple[str, Labels], float]


def parse_prometheus(text: str) -> Samples:
    """Samples of a Prometheus text exposition keyed by (name, labels); comments skipped."""
    samples: Samples = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())  # a comment or a blank line never matches
        if match is None:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        labels = frozenset((m["key"], m["value"]) for m in _LABEL.finditer(match["labels"] or ""))
        samples[(match["name"], labels)] = value
    return samples


def total(samples: Samples, name: str, **match: str) -> float:
    """Sum of a metric over every label set that contains the given labels."""
    wanted = set(match.items())
    return sum(v for (n, labels), v in samples.items() if n == name and wanted <= labels)


@dataclass(frozen=True)
class SpecCounters:
    """The speculative-decoding counters at one moment (or their difference)."""

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_pos: tuple[float, ...]
    generation_tokens: float

    @classmethod
    def from_samples(cls, samples: Samples) -> SpecCounters:
        """Read the counters (zeros and no positions when speculation is off)."""
        positions = sorted({int(dict(labels)["position"]) for n, labels in samples if n == ACCEPTED_PER_POS})
        return cls(
            drafts=total(samples, DRAFTS),
            draft_tokens=total(samples, DRAFT_TOKENS),
            accepted=total(samples, ACCEPTED),
            accepted_per_pos=tuple(total(samples, ACCEPTED_PER_POS, position=str(p)) for p in positions),
            generation_tokens=total(samples, GENERATION_TOKENS),
        )

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        if len(before.accepted_per_pos) not in (0, len(self.accepted_per_pos)):
            raise BenchError("the number of draft positions changed between two /metrics samples")
        earlier = before.accepted_per_pos or (0.0,) * len(self.accepted_per_pos)
        delta = SpecCounters(
            drafts=self.drafts - before.drafts,
            draft_tokens=self.draft_tokens - before.draft_tokens,
            accepted=self.accepted - before.accepted,
            accepted_per_pos=tuple(a - b for a, b in zip(self.accepted_per_pos, earlier, strict=True)),
            generation_tokens=self.generation_tokens - before.generation_tokens,
        )
        if min(delta.drafts, delta.draft_tokens, delta.accepted, delta.generation_tokens) < 0:
            raise BenchError("a /metrics counter went backwards: the server restarted during the run")
        return delta


@dataclass(frozen=True)
class Acceptance:
    """Acceptance derived from a counter delta."""

    drafts: int
    draft_tokens: int
    accepted: int
    rate: float
    tokens_per_iteration: float
    per_position: tuple[float, ...]


def acceptance(delta: SpecCounters) -> Acceptance | None:
    """Acceptance over a delta, or None when no draft was made in it."""
    if delta.drafts <= 0 or delta.draft_tokens <= 0:
        return None
    return Acceptance(
        drafts=round(delta.drafts),
        draft_tokens=round(delta.draft_tokens),
        accepted=round(delta.accepted),
        rate=delta.accepted / delta.draft_tokens,
        tokens_per_iteration=1.0 + delta.accepted / delta.drafts,
        per_position=tuple(p / delta.drafts for p in delta.accepted_per_pos),
    )


def scrape(client: httpx.Client) -> SpecCounters:
    """GET /metrics from the client's server and read the counters."""
    try:
        response = client.get("/metrics")
    except httpx.HTTPError as err:
        raise BenchError(f"GET /metrics failed: {err}") from err
    if response.status_code != 200:
        raise BenchError(f"GET /metrics answered {response.status_code}")
    return SpecCounters.from_samples(parse_prometheus(response.text))


class RunningSampler:
    """Polls `vllm:num_requests_running` while a block runs; `peak` is the most seen at once
    (the effective concurrency, which a KV budget or `--max-num-seqs` may cap), None when
    no sample could be read. /metrics needs no API key."""

    def __init__(self, base_url: str, interval_s: float = 0.2) -> None:
        self.peak: int | None = None
        self._stop = threading.Event()
        poll = (base_url, interval_s)
        self._thread = threading.Thread(target=self._poll, args=poll, name="bench-running", daemon=True)

    def _poll(self, base_url: str, interval_s: float) -> None:
        with httpx.Client(base_url=base_url, timeout=5.0) as client:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    response = client.get("/metrics")
                    if response.status_code == 200:
                        value = round(total(parse_prometheus(response.text), RUNNING))
                        self.peak = value if self.peak is None else max(self.peak, value)
                if self._stop.wait(interval_s):
                    return

    def __enter__(self) -> RunningSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
