"""Plain data the engine, the scheduler and the API share."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SpecSetup:
    """Speculative decoding as configured at boot (``method=None``: plain decode)."""

    method: str | None = None
    k: int = 0
    block_size: int | None = None
    schedule: tuple[tuple[int, int, int], ...] | None = None  # dynamic SD: (start, end, K) ranges
    adaptive: bool = False  # adaptive verification (V2 model runner)
    piecewise: bool = False  # dynamic SD on the V1 runner: piecewise CUDA graphs
    hybrid: bool = False  # hybrid linear-attention target: speculative MTP runs few sequences

    @property
    def enabled(self) -> bool:
        return self.method is not None and self.k > 0


@dataclass(frozen=True)
class GenRequest:
    """What the engine needs from an API request."""

    prompt_key: bytes
    prompt_tokens: int
    max_tokens: int
    ignore_eos: bool = False
    sample_key: str | None = None
    offset: int = 0
    """Generated ids the prompt already ends with (a continued request starts there)."""


@dataclass
class Step:
    """Tokens produced by one engine step for one request."""

    tokens: list[str]
    finish_reason: str | None = None
    token_ids: list[int] = field(default_factory=list)


@dataclass
class RequestStats:
    """Per-request counters (kept for tests and logging)."""

    generated: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)


class EngineDeadError(RuntimeError):
    """The engine died (a failed wake, a crash): requests get HTTP 500, /health 503."""

    def __init__(self) -> None:
        super().__init__("EngineCore encountered an issue. See stack trace (above) for the root cause.")
