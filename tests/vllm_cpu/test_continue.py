"""Streams continued across a switch on real vLLM (CPU build, tiny checkpoint, greedy).

Four 200-token streams go through the gateway at once: `/v1/completions` and
`/v1/chat/completions`, each with the client asking `"return_token_ids": true` and without.
About 50 tokens in, `compose-spec up ngram` switches away from baseline: its drain pauses
the four streams, baseline stops, ngram boots and passes its gate, and each stream goes
on there from its prompt and emitted token ids. Each client sees one unbroken stream whose
token ids (when asked), text, `id`, `created`, `model`, object and `usage` are those of an
uninterrupted run of the same request (the reference, run first on the same baseline), and
`up --json` counts the four as continued.

The tiny model's output is full of byte tokens: about a third of the break points fall
inside a character, where vLLM holds the text back; vLLM 0.32 answers a continuation whose
prompt ends there with the whole prompt's text in its first chunk, so the gateway continues
from the last id whose text was sent (tests/gateway/test_continuation.py). The test prints
whether each stream broke inside a character.

Timing: the tiny model makes 100-170 tokens/s on 2 cores (about 75 tokens/s per stream with
four at once), so 200 tokens take 2-3 s, about as long as `up` needs to reach its drain.
The old variant is therefore given a CPU quota (`docker update`, as a slow model would be):
20% of a core until every stream has 50 tokens (7-20 tokens/s per stream, measured), then 5%
while `up` runs (about 1.5 tokens/s: the 150 tokens left would take about 100 s, far longer
than `up` needs to drain), and the quota is lifted as soon as the gateway counts the streams
paused, so that the old variant stops at its usual speed. Every wait is on a condition
(tokens received, the gateway's counter, the processes), never a fixed sleep.

The tier's shared stack is left serving ngram (what test_gateway_stream.py and the later
tests start from: no extra boot for them).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.conftest import REPO
from tests.vllm_cpu.stack import SERVED, Stack

pytestmark = [pytest.mark.docker, pytest.mark.vllm_cpu]

TOKENS = 200
BEFORE_SWITCH = 50  # tokens every stream has received before `up` starts
PROMPT = "hello world the model"
PERIOD_US = 100_000
QUOTA_UNTIL_50 = 20_000  # 20% of a core: about 20 tokens/s per stream (four streams)
QUOTA_DURING_UP = 5_000  # 5%: about 1.5 tokens/s per stream
COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
CASES = ((COMPLETIONS, True), (COMPLETIONS, False), (CHAT, True), (CHAT, False))
"""(path, the client asks for token ids)"""


def request(path: str, ids: bool) -> dict:
    """A greedy 200-token streamed request, usage included; `ids`: it asks for token ids."""
    body: dict = {"model": SERVED, "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True}
    body |= {"stream": True, "stream_options": {"include_usage": True}}
    if ids:
        body["return_token_ids"] = True
    if path == CHAT:
        return body | {"messages": [{"role": "user", "content": PROMPT}]}
    return body | {"prompt": PROMPT}


@dataclass
class Received:
    """One streamed response as the client read it, event by event."""

    path: str
    asked_ids: bool
    lines: list[str] = field(default_factory=list)  # every `data:` line, [DONE] included
    events: list[dict] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # monotonic arrival of each event
    error: BaseException | None = None
    ended: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def chat(self) -> bool:
        return self.path == CHAT

    @staticmethod
    def text_of(choice: dict, chat: bool) -> str:
        return ((choice.get("delta") or {}).get("content") if chat else choice.get("text")) or ""

    def pieces(self, events: list[dict] | None = None) -> list[str]:
        """The text of each event (of `events`, else all) that carries some (one per token, mostly)."""
        texts = (
            self.text_of(c, self.chat)
            for e in (self.events if events is None else events)
            for c in e.get("choices") or ()
        )
        return [text for text in texts if text]

    @property
    def text(self) -> str:
        return "".join(self.pieces())

    @property
    def token_ids(self) -> list[int]:
        return [i for e in self.events for c in e.get("choices") or () for i in c.get("token_ids") or ()]

    @property
    def prompt_token_ids(self) -> list[int] | None:
        """The first event's prompt ids (chat: at its top level; completions: in its choice)."""
        first = self.events[0]
        where = first if self.chat else first["choices"][0]
        return where.get("prompt_token_ids")

    @property
    def usage(self) -> dict:
        (usage,) = [e["usage"] for e in self.events if e.get("usage")]
        return usage

    def tokens_seen(self) -> int:
        """Events with text so far (about the tokens received)."""
        with self.changed:
            return len(self.pieces())

    def wait(self, condition: Callable[[], bool], timeout: float) -> None:
        """Wait until `condition()` (checked at every event) or the stream ended; fail at `timeout`."""
        with self.changed:
            assert self.changed.wait_for(lambda: condition() or self.ended, timeout), (
                f"{self.path}: {len(self.events)} events after {timeout}s"
            )
        assert self.error is None, f"{self.path}: {self.error!r}"

    def read(self, stack: Stack) -> None:
        """Send the request and read its stream to the end (on a thread of its own)."""
        try:
            body = request(self.path, self.asked_ids)
            timeout = httpx.Timeout(300.0, connect=10.0)
            with httpx.stream(
                "POST", stack.url + self.path, json=body, headers=stack.headers, timeout=timeout
            ) as r:
                assert r.status_code == 200, r.read()
                for line in r.iter_lines():
                    if not line.startswith("data:"):
                        continue  # the gateway's keep-alive comments, blank lines
                    with self.changed:
                        self.lines.append(line)
                        if line != "data: [DONE]":
                            self.events.append(json.loads(line[5:]))
                            self.times.append(time.monotonic())
                        self.changed.notify_all()
        except BaseException as err:  # reported by `wait` and `join`
            self.error = err
        finally:
            with self.changed:
                self.ended = True
                self.changed.notify_all()


def start_streams(stack: Stack) -> tuple[list[Received], list[threading.Thread]]:
    """The four cases, each read on its own thread."""
    streams = [Received(path, ids) for path, ids in CASES]
    threads = [threading.Thread(target=s.read, args=(stack,), daemon=True) for s in streams]
    for thread in threads:
        thread.start()
    return streams, threads


def join(streams: list[Received], threads: list[threading.Thread], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for stream, thread in zip(streams, threads, strict=True):
        thread.join(max(0.0, deadline - time.monotonic()))
        assert not thread.is_alive(), f"{stream.path} still streaming after {timeout}s"
        assert stream.error is None, f"{stream.path}: {stream.error!r}"


def gateway_counter(stack: Stack, name: str) -> float:
    """One sample of the gateway's own metrics (0 when absent)."""
    text = httpx.get(f"{stack.url}/gateway/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " "))


@dataclass
class Quota:
    """The CPU quota of the serving variant's container (`docker update`)."""

    container: object

    def set(self, quota_us: int) -> None:
        self.container.update(cpu_period=PERIOD_US, cpu_quota=quota_us)

    def lift(self) -> None:
        """No quota again; the container may be stopping or gone (then nothing to lift)."""
        import docker.errors

        with contextlib.suppress(docker.errors.APIError):
            self.container.update(cpu_period=PERIOD_US, cpu_quota=-1)


@pytest.fixture
def baseline(cpu_stack: Stack, docker_client) -> Iterator[tuple[Stack, Quota]]:
    """The shared stack serving baseline, and its container's quota (lifted at the end)."""
    cpu_stack.ensure_serving("baseline")
    labels = [f"com.docker.compose.project={cpu_stack.project}", "vllm-composer.variant=baseline"]
    (container,) = docker_client.containers.list(filters={"label": labels})
    quota = Quota(container)
    quota.lift()
    try:
        yield cpu_stack, quota
    finally:
        quota.lift()


def check_like_reference(got: Received, ref: Received) -> None:
    """One stream, as the uninterrupted reference of the same request."""
    path = got.path
    heads = {(e["id"], e["created"], e["model"], e["object"]) for e in got.events}
    assert len(heads) == 1, (path, heads)
    (head,) = heads
    kind = "chat.completion.chunk" if got.chat else "text_completion"
    assert head[2:] == (SERVED, kind), (path, head)
    assert got.lines[-1] == "data: [DONE]", path
    assert got.text == ref.text, (path, got.text, ref.text)
    usage = {key: got.usage[key] for key in ("prompt_tokens", "completion_tokens", "total_tokens")}
    assert usage == {key: ref.usage[key] for key in usage}, (path, got.usage, ref.usage)
    assert got.usage["completion_tokens"] == TOKENS and got.usage["prompt_tokens"] == len(
        ref.prompt_token_ids
    )
    finishes = [
        c.get("finish_reason") for e in got.events for c in e.get("choices") or () if c.get("finish_reason")
    ]
    assert finishes == ["length"], (path, finishes)
    if got.chat:
        assert all("text" not in c for e in got.events for c in e.get("choices") or ()), path
    if got.asked_ids:
        assert got.token_ids == ref.token_ids, path
        assert got.prompt_token_ids == ref.prompt_token_ids, path
    else:  # no id member reaches the client, not even the nulls vLLM 0.32 writes where it has none
        members = [(e, "prompt_token_ids") for e in got.events]
        members += [
            (c, key)
            for e in got.events
            for c in e.get("choices") or ()
            for key in ("token_ids", "prompt_token_ids")
        ]
        assert [where[key] for where, key in members if key in where] == [], path


def paused_after(got: Received) -> tuple[int, float, bool]:
    """The longest gap between two events: (events with text before it, its seconds, whether
    the last event before it carried no text: vLLM held back its bytes, inside a character)."""
    gap, at = max((b - a, i + 1) for i, (a, b) in enumerate(zip(got.times, got.times[1:], strict=False)))
    return len(got.pieces(got.events[:at])), gap, not got.pieces(got.events[at - 1 : at])


def test_streams_continue_token_for_token_across_a_switch(baseline: tuple[Stack, Quota]):
    stack, quota = baseline

    # the references: the same requests, uninterrupted, on the same baseline (ids asked)
    references = {}
    for path in (COMPLETIONS, CHAT):
        ref = Received(path, True)
        ref.read(stack)
        assert ref.error is None, ref.error
        assert len(ref.token_ids) == TOKENS and ref.usage["completion_tokens"] == TOKENS, ref.usage
        references[path] = ref
        rate = (TOKENS - 1) / (ref.times[-1] - ref.times[0])
        print(f"reference {path}: {rate:.0f} tokens/s after the first")

    # the same requests again, four at once, on a slowed baseline
    continued_before = gateway_counter(stack, "gateway_continued_streams_total")
    quota.set(QUOTA_UNTIL_50)
    streams, threads = start_streams(stack)
    began = time.monotonic()
    for stream in streams:
        stream.wait(lambda s=stream: len(s.pieces()) >= BEFORE_SWITCH, timeout=180)
    print(f"{BEFORE_SWITCH} tokens in each stream after {time.monotonic() - began:.1f} s")
    assert not any(s.ended for s in streams), "a stream ended before the switch"
    quota.set(QUOTA_DURING_UP)
    up = subprocess.Popen(
        [*stack.args, "up", "ngram", "--json"],
        env=stack.env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # the drain pauses the streams: then the old variant may run at full speed to stop
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and up.poll() is None:
            paused = gateway_counter(stack, "gateway_continued_streams_total") - continued_before
            if paused >= len(streams):
                break
            with streams[0].changed:  # woken by an event, else checks the gateway again
                streams[0].changed.wait(0.2)
        quota.lift()
        out, err = up.communicate(timeout=600)
    finally:
        if up.poll() is None:
            up.kill()
            up.communicate()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert up.returncode == 0 and lines, out[-2000:] + err[-3000:]
    result = json.loads(lines[-1])
    assert (result["variant"], result["previous"], result["outcome"]) == ("ngram", "baseline", "swapped"), (
        result
    )
    join(streams, threads, timeout=300)
    print("up:", result["drained"], result["timings"])

    # every stream was paused mid-way by the drain and continued on ngram
    assert result["drained"]["continued"] == len(streams), result["drained"]
    assert result["drained"]["cut"] == 0, result["drained"]
    assert gateway_counter(stack, "gateway_continued_streams_total") - continued_before == len(streams)
    for stream in streams:
        before, gap, inside = paused_after(stream)
        assert BEFORE_SWITCH <= before < TOKENS, (stream.path, before)
        assert gap > 5.0, (stream.path, gap)  # the boot of ngram, not the pace of the tokens
        check_like_reference(stream, references[stream.path])
        where = " (inside a character)" if inside else ""
        print(f"{stream.path} ids={stream.asked_ids}: paused after {before} tokens for {gap:.1f} s{where}")
    assert stack.serving() == "ngram"  # what the tier's later tests start from
