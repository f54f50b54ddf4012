"""Benchmark prompts: built-in ones, padded to a size, or read from a file."""

from __future__ import annotations

from pathlib import Path

from composer.errors import UsageError
from composer.stack.bounded import read_named_text

SEPARATOR = "---"
CHARS_PER_TOKEN = 4  # a rough English average; only used to size synthetic prompts

BUILTIN_PROMPTS: tuple[str, ...] = (
    "Explain in detail how speculative decoding speeds up large language model inference, "
    "covering drafting, verification and the acceptance rate.",
    "Write a detailed technical guide to running a large language model on four consumer GPUs "
    "with tensor parallelism, including memory planning for the KV cache.",
    "Describe step by step how an operator should benchmark an inference server fairly: "
    "warm-up, single-stream measurement, medians and correctness checks.",
)

_CONTEXT = (
    "Context: the server runs one model behind one port. Requests arrive one at a time. "
    "Decode speed is measured in tokens per second after the first token. "
)


def padded(prompt: str, tokens: int) -> str:
    """The prompt preceded by repeated context so that it is about `tokens` tokens long."""
    missing = tokens * CHARS_PER_TOKEN - len(prompt)
    if missing <= 0:
        return prompt
    repeats = -(-missing // len(_CONTEXT))
    return (_CONTEXT * repeats)[:missing].rstrip() + "\n\n" + prompt


def read_prompt_file(path: str | Path) -> tuple[str, ...]:
    """Prompts from a text file, separated by lines that hold only `---`."""
    text = read_named_text(path, "prompt file")
    prompts: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip() == SEPARATOR:
            prompts.append([])
        else:
            prompts[-1].append(line)
    found = tuple(p for p in ("\n".join(lines).strip() for lines in prompts) if p)
    if not found:
        raise UsageError(f"the prompt file {str(path)!r} holds no prompt")
    return found
