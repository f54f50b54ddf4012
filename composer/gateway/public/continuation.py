"""Stream continuation: a streamed completion whose backend breaks mid-way goes on elsewhere,
token for token, as the same response.

For each eligible streamed `/v1/completions` or `/v1/chat/completions` request (`prepare`),
the gateway asks upstream for `"return_token_ids": true`; `Stream` records the prompt's token
ids (first chunk; top level for chat, in the choice for completions) and each chunk's
`token_ids`, and removes those fields unless the client asked for them. When the upstream
breaks after the head was sent (its connection fails, it ends without `[DONE]`, or it stalls),
`Stream.relay` asks the proxy for a new leg (`Reopen`: the gate's hold, then a ready upstream)
with `/v1/completions`, `prompt` = prompt ids + emitted ids, `max_tokens`/`min_tokens` reduced
by what was emitted, every other field unchanged, and streams it back under the first
response's `id`, `created`, `model` and object type (`delta` for chat), `usage` counted from
the original prompt. The prompt stops at the last emitted id whose text reached the client
(`settled`: vLLM holds back the first bytes of a character, and answers a prompt that ends
inside one with the whole prompt's text). A leg that cannot be opened ends the stream with an
error event (`gateway_continuation_failed_total`).

Refused, counted by reason in `gateway_continuation_refused_total` (`metrics.CONTINUATION_REFUSALS`):
`n`/`best_of` above 1, `echo`, `prompt_logprobs`, structured output, `tools`, `tool_call` (a
stream that started one), non-zero presence/frequency `penalties`, `reasoning` (a chat stream
showing `reasoning_content`), `logprobs` on chat, `batch` (several prompts), `no_token_ids`,
`max_model_len` (at a planned switch: it would not fit in the next upstream's context),
`max_tokens` (a limit whose value the gateway cannot read as vLLM does: `budget`) and `format`
(events the gateway cannot read).

A planned switch pauses streams (`Stream.pause`, `ProxyApp.pause_streams`): the leg is let go
with no failure counted, and the stream goes on as after a break, on the upstream the gate
admits it to next.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from composer.gateway.public.answers import sse_error
from composer.gateway.status.metrics import Metrics

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
PATHS = frozenset({COMPLETIONS, CHAT})
STRUCTURED = ("structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar")
STRUCTURED_FORMATS = ("json_object", "json_schema", "structural_tag")
# Chat fields a `/v1/completions` continuation does not take (its prompt is token ids).
CHAT_ONLY = frozenset(
    {
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "functions",
        "function_call",
        "chat_template",
        "chat_template_kwargs",
        "add_generation_prompt",
        "continue_final_message",
        "documents",
        "reasoning_effort",
        "include_reasoning",
        "max_completion_tokens",
        "logprobs",
        "top_logprobs",
        "mm_processor_kwargs",
        "media_io_kwargs",
        "modalities",
        "audio",
        "response_format",
    }
)
MAX_EVENT = 1 << 20  # bytes of an unfinished event kept; past it the stream passes unread
DONE = b"[DONE]"
KEEPALIVE = b": the gateway continues this stream on another upstream\n\n"
BREAK_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)
# A `"token_ids"` or `"prompt_token_ids"` member (a list of ids, or null) with its comma. A raw
# `"` never occurs inside a JSON string, so this matches members only, never text.
ID_MEMBER = re.compile(
    rb',\s*"(?:prompt_)?token_ids"\s*:\s*(?:\[[0-9,\s]*\]|null)'
    rb'|"(?:prompt_)?token_ids"\s*:\s*(?:\[[0-9,\s]*\]|null)\s*,?'
)

_IDS_KEY = b'"token_ids":'
_PLAIN_MEMBER = re.compile(rb', ?"token_ids": ?\[([0-9]+(?:, ?[0-9]+)*)\](?=[,}])')
_NULL_PROMPT_IDS = re.compile(rb', ?"prompt_token_ids": ?null(?=[,}])')
_NOT_PLAIN = re.compile(
    rb'"(?:reasoning|tool_calls"|error")|"index": ?(?:[^0 ]|0[^,}])|"finish_reason": ?[^n ]'
)
"""What sends an event to the full parse: a key that may refuse, a choice other than index 0,
a finish."""
_HAS_TEXT = re.compile(rb'"(?:text|content)": ?"[^"]')
"""A plain event whose choice carries text (`text`, or `delta.content` for chat)."""


def plain_ids(raw: bytes) -> tuple[list[int], list[tuple[int, int]]] | None:
    """The ids of an ordinary mid-stream event, read from its bytes, and the spans of its id
    members with their commas; None for any other event (the caller parses it): one
    `"token_ids"` list of ids after `"choices"`, at most a `"prompt_token_ids": null` beside
    it, nothing `_NOT_PLAIN` matches."""
    key = raw.find(_IDS_KEY)
    if key < 0 or raw.find(b'"choices"', 0, key) < 0:
        return None
    members = raw.count(b'token_ids"')
    prompt = _NULL_PROMPT_IDS.search(raw) if members == 2 else None
    if members != 1 and prompt is None:
        return None
    # the only `"token_ids":` member (a raw quote is never inside a JSON string), its comma before
    member = _PLAIN_MEMBER.search(raw, key - 2)
    if member is None or _NOT_PLAIN.search(raw) is not None:
        return None
    listed = member[1]
    ids = [int(x) for x in listed.split(b",")] if b"," in listed else [int(listed)]
    return ids, [member.span()] if prompt is None else sorted((prompt.span(), member.span()))


def _cut(raw: bytes, spans: list[tuple[int, int]]) -> bytes:
    """`raw` without the byte spans `spans` (sorted, apart)."""
    kept, at = [], 0
    for start, end in spans:
        kept.append(raw[at:start])
        at = end
    kept.append(raw[at:])
    return b"".join(kept)


class Stalled(Exception):
    """A resumable stream got no bytes for `stall_timeout`; `event` ends it when not continued."""

    def __init__(self, event: bytes) -> None:
        super().__init__("stalled")
        self.event = event


class Paused(Exception):
    """A stream's leg was paused (`Stream.pause`): it goes on elsewhere, not a failure."""


class ContinuationFailed(Exception):
    """No leg could be opened (no upstream ready within hold_timeout, or it refused)."""


@dataclass
class Leg:
    """One upstream request of a stream: its chunks, and `end(reason)` (None: it finished;
    else why it broke), called once, which frees its ticket, its upstream's count and its
    connection (closing it cancels the request upstream)."""

    chunks: AsyncIterator[bytes]
    end: Callable[[str | None], None]
    pause: Callable[[], None] = lambda: None  # stop reading it: its chunks raise `Paused`
    upstream: str = ""  # the URL it reads from
    # `pipe(sink)`: its bytes go to `sink` as they arrive while its chunks wait for more (True:
    # taken; False: they come through `chunks`); `pipe(None)`: all through `chunks`
    pipe: Callable[[Callable[[bytes], bool] | None], None] = lambda _: None


Reopen = Callable[[str, bytes], Awaitable[Leg]]  # (path, body) -> the leg
# A server's own writer of body bytes: (may they go out now, in order?; write them)
Direct = tuple[Callable[[], bool], Callable[[bytes], object]]


BAD = -1
"""`_count` of a value whose integer the gateway cannot tell for sure."""
LIMIT_KEYS = {CHAT: ("max_completion_tokens", "max_tokens"), COMPLETIONS: ("max_tokens",)}
"""The limits vLLM obeys, first first: chat takes `max_completion_tokens or max_tokens`,
completions only `max_tokens` (they ignore `max_completion_tokens`)."""
_DIGITS = re.compile(r"[0-9]+")


def _count(value: Any) -> int | None:
    """The integer vLLM reads `value` as (its models coerce: `"10"` and `10.0` are 10), None when
    absent, `BAD` for anything else (`"10.5"`, `True`, `" 1_0"`: refused rather than guessed)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return BAD
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else BAD
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    return BAD


def budget(path: str, payload: dict[str, Any]) -> int | None:
    """The most tokens the backend emits for this request, read as vLLM reads it (None: no limit
    given; `BAD`: one the gateway cannot read)."""
    for key in LIMIT_KEYS[path]:
        limit = _count(payload.get(key))
        if limit:  # vLLM: `max_completion_tokens or max_tokens`
            return limit
    return None


def refusal(path: str, payload: dict[str, Any]) -> str | None:
    """Why a streamed request cannot be continued exactly; None when it can."""
    for key in ("n", "best_of"):
        if payload.get(key) not in (None, 1):
            return key
    if payload.get("echo"):
        return "echo"
    if payload.get("prompt_logprobs") is not None:
        return "prompt_logprobs"
    fmt = payload.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in STRUCTURED_FORMATS:
        return "structured_output"
    if any(payload.get(key) is not None for key in STRUCTURED):
        return "structured_output"
    if (payload.get("tools") or payload.get("functions")) and payload.get("tool_choice") != "none":
        return "tools"
    if any(payload.get(key) not in (None, 0) for key in ("presence_penalty", "frequency_penalty")):
        return "penalties"
    if any(_count(payload.get(key)) is BAD for key in (*LIMIT_KEYS[path], "min_tokens")):
        return "max_tokens"
    if path == CHAT:
        return "logprobs" if payload.get("logprobs") else None
    prompt = payload.get("prompt")
    if isinstance(prompt, list) and len(prompt) > 1 and not all(isinstance(t, int) for t in prompt):
        return "batch"
    return None


def prepare(path: str, payload: dict[str, Any], metrics: Metrics) -> Stream | None:
    """The record of an eligible streamed request (None: not streamed, or refused and counted)."""
    if path not in PATHS or payload.get("stream") is not True:
        return None
    reason = refusal(path, payload)
    if reason is not None:
        metrics.continuation_refused.labels(reason).inc()
        return None
    return Stream(path == CHAT, payload, metrics)


class Stream:
    """One eligible stream: what the client asked, what the upstream legs sent so far."""

    def __init__(self, chat: bool, payload: dict[str, Any], metrics: Metrics) -> None:
        self.chat = chat
        self.path = CHAT if chat else COMPLETIONS
        self.payload = payload
        self.metrics = metrics
        self.wants_ids = payload.get("return_token_ids") is True
        self.prompt_ids: list[int] | None = None
        # the ids sent so far, 4 bytes each (a list of ints takes about 36 a token)
        self.emitted = array("i")
        self.head: dict[str, Any] = {}  # id, object, created, model of the first chunk
        self.refused: str | None = None
        self.finished = False  # a finish_reason was seen
        self.done = False  # `[DONE]` was seen
        self.billed = False  # the final usage chunk (no choices) reached the client
        self.legs = 0  # continuation legs opened
        self.resumed = False  # its upstream broke and it went on (counted once)
        self._base = 0  # emitted ids before the current leg (its prompt's share of them)
        self.settled = 0  # emitted ids whose text reached the client (see the module's doc)
        self._skip = 0  # ids the current leg sends again that the client already has
        self.leg: Leg | None = None  # the leg being read
        self._buffer = b""

    def body(self) -> bytes:
        """The request to send first: the client's, asking for token ids."""
        return json.dumps({**self.payload, "return_token_ids": True}, separators=(",", ":")).encode()

    @property
    def upstream(self) -> str:
        """The URL of the upstream the stream reads from now ("" while it has none)."""
        return self.leg.upstream if self.leg is not None else ""

    def pause(self, context: int | None = None) -> bool:
        """Stop reading the current leg: it goes on as after a break, no failure counted (False:
        it cannot, or would not fit in `context`, the next upstream's max_model_len)."""
        if self.leg is None or self.refused is not None or self.done:
            return False
        if self.head and self.prompt_ids is None:  # its upstream sends no token ids: it drains
            self.refuse("no_token_ids")
            return False
        if context is not None and self.prompt_ids is not None and self._length() > context:
            self.refuse("max_model_len")
            return False
        self.leg.pause()
        return True

    def refuse(self, reason: str) -> None:
        """The stream showed something that cannot be continued: count it, once."""
        if self.refused is None:
            self.refused = reason
            self.metrics.continuation_refused.labels(reason).inc()

    def feed(self, chunk: bytes) -> bytes:
        """Record what `chunk` carries; return what the client gets (whole events only). A
        stream framed otherwise than vLLM's (CR line ends, `id:` or `event:` fields) passes
        unread, refused (`format`): it could not be read, nor continued without repeating
        what the client got."""
        if self.refused == "format":
            if self._buffer:  # what was kept of an event when it was refused goes first
                chunk, self._buffer = self._buffer + chunk, b""
            return chunk
        if b"\r" in chunk:  # a JSON text holds no raw CR: CRLF or CR framing
            self.refuse("format")
            data, self._buffer = self._buffer + chunk, b""
            return data
        data = self._buffer + chunk if self._buffer else chunk
        end = data.rfind(b"\n\n")
        if end < 0:
            if len(data) > MAX_EVENT:
                self.refuse("format")
                self._buffer = b""
                return data
            self._buffer = data
            return b""
        if end + 2 == len(data):
            self._buffer = b""
            if data.find(b"\n\n") == end:  # one event (the common read): no copy of it
                out = self._plain(data)
                return out if out is not None else self._event(data[:end], False)
        else:
            self._buffer = data[end + 2 :]
        events = data[:end]
        if events.find(b"\n\n") < 0:
            return self._event(events)
        return b"".join([self._event(event) for event in events.split(b"\n\n")])

    def _plain(self, framed: bytes) -> bytes | None:
        """What the client gets of an ordinary first-leg event (`framed`: with its blank line),
        its ids recorded, read from its bytes (`plain_ids`); None for any other (parse it)."""
        if self.legs or not self.head or self.prompt_ids is None or not framed.startswith(b"data:"):
            return None
        plain = plain_ids(framed)
        if plain is None:
            return None
        ids, spans = plain
        try:
            self.emitted.extend(ids)
        except OverflowError:  # no token id: the stream cannot be continued
            self.refuse("format")
        if _HAS_TEXT.search(framed) is not None:
            self.settled = len(self.emitted)
        return framed if self.wants_ids else _cut(framed, spans)

    def _event(self, raw: bytes, plain: bool = True) -> bytes:
        """What the client gets of one event (`raw`: without its blank line; `plain`: it may be
        an ordinary one, not yet tried)."""
        if not raw.startswith(b"data:"):
            if not raw.startswith(b":"):  # a field other than data (a comment is kept as it is)
                self.refuse("format")
            return raw + b"\n\n"
        if plain and self.legs == 0 and self.head and self.prompt_ids is not None:
            out = self._plain(raw + b"\n\n")
            if out is not None:  # the common chunk: read without parsing the event
                return out
        text = raw[5:].strip()
        if text == DONE:
            self.done = True
            return raw + b"\n\n"
        try:
            event = json.loads(text)
        except ValueError:
            event = None
        if not isinstance(event, dict) or "error" in event:
            self.refuse("format")  # unreadable, or the backend's own end of it: never sent again
            return raw + b"\n\n"
        if event.get("choices") == [] and isinstance(event.get("usage"), dict):
            self.billed = True
        if self.legs == 0:  # the ids it removed are cut out of the bytes: no re-serialising
            removed = self._record(event)
            stripped, cut = ID_MEMBER.subn(b"", raw) if removed else (raw, 0)
            if cut == removed:
                return stripped + b"\n\n"
        elif not self._adapt(event):
            return b""
        return self._data(event)

    def _record(self, event: dict[str, Any]) -> int:
        """A first-leg event: keep its head and ids; drop the ids unless asked for (how many
        members were dropped)."""
        if not self.head:
            self.head = {key: event.get(key) for key in ("id", "object", "created", "model")}
        changed = int(self._ids(event, "prompt_token_ids"))
        for choice in event.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            if choice.get("index", 0) != 0:
                self.refuse("n")
            changed += self._ids(choice, "prompt_token_ids") + self._ids(choice)
            if self._text(choice):
                self.settled = len(self.emitted)
            delta = choice.get("delta")
            if isinstance(delta, dict):
                if delta.get("reasoning_content") or delta.get("reasoning"):
                    self.refuse("reasoning")
                if delta.get("tool_calls"):
                    self.refuse("tool_call")
            if choice.get("finish_reason"):
                self.finished = True
        return changed

    def _ids(self, where: dict[str, Any], key: str = "token_ids") -> bool:
        """Record the ids `where[key]` holds (emitted, or the prompt's); drop the member unless
        the client asked for it (True: dropped)."""
        ids = where.get(key)
        if isinstance(ids, list):
            if not all(type(i) is int and 0 <= i < 2**31 for i in ids):
                self.refuse("format")  # not token ids: cannot be sent as a prompt
            elif key == "token_ids":
                self.emitted.extend(ids)
            elif self.prompt_ids is None:
                self.prompt_ids = ids
        if key not in where or self.wants_ids:
            return False
        del where[key]
        return True

    @staticmethod
    def _text(choice: dict[str, Any]) -> str:
        """The text a choice carries (`delta.content` for chat, else `text`)."""
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        return text if isinstance(text, str) else ""

    def _drop_sent(self, choice: dict[str, Any]) -> bool:
        """Drop the ids of a leg's first chunks that the client already has (the leg began at
        the last settled id); True when the choice had ids and all of them were such."""
        ids = choice.get("token_ids")
        if not self._skip or not isinstance(ids, list) or not ids:
            return False
        again = min(self._skip, len(ids))
        self._skip -= again
        choice["token_ids"] = ids[again:]
        return again == len(ids)

    def _adapt(self, event: dict[str, Any]) -> bool:
        """A continuation event (`text_completion`) in the first response's shape (False: it
        carries nothing the client has not got, and is left out)."""
        event.update(self.head)
        event.pop("prompt_token_ids", None)
        choices = []
        for choice in event.get("choices") or ():
            choice.pop("prompt_token_ids", None)
            sent = self._drop_sent(choice)
            self._ids(choice)
            text = self._text(choice)
            if text:
                self.settled = len(self.emitted)
            if choice.get("finish_reason"):
                self.finished = True
            elif sent and not text:
                continue
            if self.chat:
                shaped = {"index": choice.get("index", 0), "delta": {"content": choice.pop("text", "")}}
                shaped.update((k, v) for k, v in choice.items() if k != "index")
                choice = shaped
            choices.append(choice)
        if "choices" in event:
            if event["choices"] and not choices and not event.get("usage"):
                return False
            event["choices"] = choices
        usage = event.get("usage")
        if isinstance(usage, dict):
            event["usage"] = self._usage(self._base + int(usage.get("completion_tokens") or 0))
        return True

    def _usage(self, completion: int) -> dict[str, int]:
        prompt = len(self.prompt_ids or ())
        return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}

    def _following(self) -> tuple[str, bytes] | None:
        """The request that takes the stream on: the client's again while nothing reached it,
        else the continuation from its token ids; None when it cannot go on."""
        if self.refused is not None or self.done:
            return None
        if not self.head:  # no event yet: the client has seen the response head only
            self._buffer = b""
            return self.path, self.body()
        if self.prompt_ids is None:
            self.refuse("no_token_ids")
            return None
        return COMPLETIONS, self.next_body()

    def _length(self) -> int:
        """The tokens its continuation needs in the model's context: the prompt plus all it
        may emit (the next token at least, without a limit)."""
        limit = self._max_tokens()
        return len(self.prompt_ids or ()) + (limit if limit is not None else len(self.emitted) + 1)

    def _max_tokens(self) -> int | None:
        return budget(self.path, self.payload)

    def next_body(self) -> bytes:
        """The continuation request: `/v1/completions` from prompt + the settled emitted ids."""
        body = {k: v for k, v in self.payload.items() if not (self.chat and k in CHAT_ONLY)}
        body.pop("request_id", None)
        body["prompt"] = [*(self.prompt_ids or ()), *self.emitted[: self.settled]]
        limit = self._max_tokens()
        if limit is not None:
            body["max_tokens"] = limit - self.settled
        body.pop("max_completion_tokens", None)  # completions ignore it: the limit is max_tokens
        least = _count(self.payload.get("min_tokens"))
        if least is not None:
            body["min_tokens"] = max(0, least - self.settled)
        body["stream"] = True
        body["return_token_ids"] = True
        return json.dumps(body, separators=(",", ":")).encode()

    def _closing(self) -> bytes:
        """The end of a stream that emitted everything before its upstream broke."""
        out = b""
        if not self.finished:
            choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length"}
            choice.update({"delta": {}} if self.chat else {"text": ""})
            out += self._data({**self.head, "choices": [choice]})
        options = self.payload.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage") and not self.billed:
            out += self._data({**self.head, "choices": [], "usage": self._usage(len(self.emitted))})
        return out + b"data: [DONE]\n\n"

    @staticmethod
    def _data(event: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"

    async def relay(
        self,
        leg: Leg,
        reopen: Reopen,
        keepalive: float = 0.0,
        running: set[Stream] | None = None,
        direct: Direct | None = None,
    ) -> AsyncIterator[bytes]:
        """The client's stream: `leg`'s events, then those of the leg `reopen` opens each time
        one breaks or is paused (SSE comments every `keepalive` s meanwhile); in `running` while
        it lasts. A first leg that cannot go on ends as without continuation. With `direct`
        (ready, write), each leg's events are written as they arrive while `ready()` says so
        (`Leg.pipe`), the rest yielded."""
        sent_at = time.monotonic()
        paused_at: float | None = None
        running = set() if running is None else running
        running.add(self)

        def sink(chunk: bytes) -> bool:
            nonlocal sent_at, paused_at
            assert direct is not None
            if not direct[0]():
                return False
            out = self.feed(chunk)
            if out:
                if paused_at is not None:
                    self.metrics.continuation_pause.observe(time.monotonic() - paused_at)
                    paused_at = None
                direct[1](out)
                sent_at = time.monotonic()
            return True

        try:
            while True:
                self.leg = leg
                if direct is not None:
                    leg.pipe(sink)
                early, stall, error = False, None, None
                try:
                    async for chunk in leg.chunks:
                        out = self.feed(chunk)
                        if out:
                            if paused_at is not None:
                                self.metrics.continuation_pause.observe(time.monotonic() - paused_at)
                                paused_at = None
                            yield out
                            sent_at = time.monotonic()
                    if self.done:
                        return
                    broke, early = "the backend ended the stream before [DONE]", True
                except BREAK_ERRORS as err:
                    broke, error = f"{type(err).__name__}: {err}", err
                except Stalled as err:
                    broke, stall = "stall", err.event
                except Paused:
                    broke = None  # not a failure: the upstream stays in
                following = self._following()
                if following is None:
                    leg.end(None if early else broke)
                    if error is not None and self.legs == 0:
                        raise error  # handled as without continuation
                    if stall is not None:
                        yield stall
                    elif not early:
                        yield sse_error(502, f"the backend broke the stream ({broke})")
                    elif self._buffer:  # its last bytes, an event without its blank line
                        yield self._buffer
                    return
                leg.end(broke)
                if paused_at is None:
                    paused_at = sent_at
                if not self.resumed:
                    self.resumed = True
                    self.metrics.continued.inc()
                limit = self._max_tokens()
                if self.head and (self.finished or (limit is not None and len(self.emitted) >= limit)):
                    yield self._closing()
                    return
                try:
                    opening = asyncio.ensure_future(reopen(*following))
                    try:
                        while not (await asyncio.wait({opening}, timeout=keepalive or None))[0]:
                            yield KEEPALIVE  # the client's stream stays open while it waits
                    except BaseException:  # the client went away meanwhile
                        opening.cancel()
                        if opening.done() and not opening.cancelled() and opening.exception() is None:
                            opening.result().end(None)
                        raise
                    leg = opening.result()
                except ContinuationFailed as err:
                    self.metrics.continuation_failed.inc()
                    yield sse_error(502, f"the backend broke and the stream could not be continued: {err}")
                    return
                if self.head:  # a continuation; else the request sent again is a first leg
                    self.legs += 1
                    self._base, self._skip = self.settled, len(self.emitted) - self.settled
        finally:
            self.leg = None
            running.discard(self)
            leg.end(None)
