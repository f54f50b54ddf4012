"""The simulator reads a request's limits as vLLM's OpenAI server does (pydantic's lax ints)."""

from __future__ import annotations

from typing import Any

import pytest
from vllm.sim.openai_api import ApiError, parse_request


def limit(chat: bool, **fields: Any) -> int:
    request: dict[str, Any] = {"model": "m", **fields}
    if chat:
        request["messages"] = [{"role": "user", "content": "hi"}]
    else:
        request["prompt"] = [5, 6, 7]
    return parse_request(request, chat, ["m"], 4096).gen.max_tokens


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("value", [10, "10", 10.0, " 10 ", "10.0", "1_0", "+10"])
def test_integer_valued_strings_and_floats_are_the_integer(chat: bool, value: Any) -> None:
    assert limit(chat, max_tokens=value) == 10


@pytest.mark.parametrize("value", [10.5, "10.5", "1e1", "ten", [10], {}])
def test_anything_else_is_a_400_naming_the_field(value: Any) -> None:
    with pytest.raises(ApiError, match="max_tokens") as raised:
        limit(False, max_tokens=value)
    assert raised.value.status == 400


def test_completions_ignore_max_completion_tokens_chat_takes_it_first() -> None:
    assert limit(False, max_tokens=10, max_completion_tokens=500) == 10
    assert limit(False, max_tokens=10, max_completion_tokens="junk") == 10  # an unknown field
    assert limit(True, max_tokens=500, max_completion_tokens="10") == 10
    assert limit(True, max_tokens="10", max_completion_tokens=0) == 10  # `or`: 0 falls through
    with pytest.raises(ApiError, match="at least 1"):
        limit(False, max_tokens=0)
