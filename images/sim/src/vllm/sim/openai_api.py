"""OpenAI-compatible request parsing and response bodies (chat and text completions)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vllm.sim import textgen
from vllm.sim.engine import GenRequest


class ApiError(Exception):
    """An error answered as an OpenAI-style JSON error body."""

    def __init__(
        self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.status}}


@dataclass(frozen=True)
class ParsedRequest:
    """A validated completion request."""

    chat: bool
    model: str
    stream: bool
    include_usage: bool
    gen: GenRequest
    prompt_ids: tuple[int, ...] = ()
    return_token_ids: bool = False
    request_id: str | None = None


def _number(body: Mapping[str, Any], key: str, default: float) -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApiError(400, f"'{key}' must be a number", param=key)
    return float(value)


_LAX_INT = re.compile(r"[+-]?[0-9](?:_?[0-9])*(?:\.0*)?")


def _lax_int(body: Mapping[str, Any], key: str) -> int | None:
    """`body[key]` read as vLLM's pydantic models read an optional int field (lax mode):
    integral floats and strings of an integer (`10.0`, `"10"`, `" 10 "`, `"1_0"`, `"10.0"`) and
    booleans are integers; a fraction or anything else is a 400."""
    value = body.get(key)
    if value is None or isinstance(value, int):
        return None if value is None else int(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, str) and _LAX_INT.fullmatch(value.strip()):
        return int(value.strip().split(".")[0].replace("_", ""))
    raise ApiError(400, f"'{key}' must be a valid integer", param=key)


def parse_request(
    body: Mapping[str, Any], chat: bool, served_names: list[str], max_model_len: int
) -> ParsedRequest:
    """Validate a completion request and derive the engine request."""
    model = body.get("model") or served_names[0]
    if model not in served_names:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise ApiError(400, "'chat_template_kwargs' must be an object", param="chat_template_kwargs")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "'messages' must be a non-empty list", param="messages")
        ids = textgen.encode_chat(
            (m for m in messages if isinstance(m, Mapping)), sorted(kwargs.items(), key=str)
        )
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = textgen.encode_text(prompt) or [textgen.BOS]
        elif isinstance(prompt, list) and prompt and all(_token_id(t) for t in prompt):
            ids = list(prompt)
        else:
            raise ApiError(400, "'prompt' must be a string or a list of token ids", param="prompt")
    prompt_tokens = len(ids)
    # vLLM: chat takes `max_completion_tokens or max_tokens`; completions have no
    # max_completion_tokens (an unknown field, ignored)
    limit_key, raw_max = "max_tokens", _lax_int(body, "max_tokens")
    if chat and _lax_int(body, "max_completion_tokens"):
        limit_key, raw_max = "max_completion_tokens", _lax_int(body, "max_completion_tokens")
    room = max_model_len - prompt_tokens
    if raw_max is None:
        max_tokens = room
    elif raw_max < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {raw_max}.", param=limit_key)
    else:
        max_tokens = raw_max
    if max_tokens > room or room <= 0:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages or "
            "completion.",
            param=limit_key,
        )
    temperature = _number(body, "temperature", 1.0)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ApiError(400, "'seed' must be an integer", param="seed")
    options = body.get("stream_options") or {}
    request_id = body.get("request_id")
    if request_id is not None and (not isinstance(request_id, str) or not request_id):
        raise ApiError(400, "'request_id' must be a non-empty string", param="request_id")
    prompt_key, offset = textgen.split_context(ids)
    gen = GenRequest(
        prompt_key=prompt_key,
        offset=offset,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        ignore_eos=bool(body.get("ignore_eos", False)),
        sample_key=textgen.sample_key(temperature, seed),
    )
    return ParsedRequest(
        chat=chat,
        model=model,
        stream=bool(body.get("stream", False)),
        include_usage=bool(options.get("include_usage", False)),
        gen=gen,
        prompt_ids=tuple(ids),
        return_token_ids=bool(body.get("return_token_ids", False)),
        request_id=request_id,
    )


def _token_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class ResponseBuilder:
    """Builds the response objects of one request."""

    def __init__(self, request: ParsedRequest) -> None:
        self.request = request
        prefix = "chatcmpl" if request.chat else "cmpl"
        self.id = f"{prefix}-{request.request_id or uuid.uuid4().hex}"
        self.created = int(time.time())
        self._prompt_ids_sent = False

    def usage(self, completion_tokens: int) -> dict[str, int]:
        prompt = self.request.gen.prompt_tokens
        return {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion_tokens,
            "completion_tokens": completion_tokens,
        }

    def _envelope(self, chunk: bool) -> dict[str, Any]:
        if self.request.chat:
            kind = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            kind = "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.request.model}

    def _token_ids(self, body: dict[str, Any], choice: dict[str, Any], ids: list[int] | None) -> None:
        """vLLM's return_token_ids fields: the prompt's ids once (chat: top level, text: in
        the choice), then each choice's ids."""
        if not self.request.return_token_ids:
            return
        if not self._prompt_ids_sent:
            self._prompt_ids_sent = True
            (body if self.request.chat else choice)["prompt_token_ids"] = list(self.request.prompt_ids)
        choice["token_ids"] = list(ids or [])

    def chunk(
        self, text: str | None, finish: str | None, role: bool = False, ids: list[int] | None = None
    ) -> dict[str, Any]:
        """One streaming chunk (``text=None`` with ``role=True``: the opening role delta)."""
        body = self._envelope(chunk=True)
        if self.request.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if text is not None:
                delta["content"] = text
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {
                "index": 0,
                "text": text or "",
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
        self._token_ids(body, choice, ids)
        body["choices"] = [choice]
        return body

    def usage_chunk(self, completion_tokens: int) -> dict[str, Any]:
        body = self._envelope(chunk=True)
        body["choices"] = []
        body["usage"] = self.usage(completion_tokens)
        return body

    def full(
        self, text: str, finish: str, completion_tokens: int, ids: list[int] | None = None
    ) -> dict[str, Any]:
        """The non-streaming response."""
        body = self._envelope(chunk=False)
        if self.request.chat:
            message = {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": []}
            choice: dict[str, Any] = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
        self._token_ids(body, choice, ids)
        body["choices"] = [choice]
        body["usage"] = self.usage(completion_tokens)
        return body
