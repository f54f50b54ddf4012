"""Batching model: what one engine step costs when several requests share it (pure).

Every running request advances in the same step (continuous batching). Times are
unscaled seconds of the reference machine; the scheduler divides them by SIM_TIME_SCALE.

- target forward over ``n`` decode tokens: ``1/baseline_tok_s + memory_ms_per_token*(n-1)
  + compute_ms_per_token*max(0, n - compute_knee_tokens)`` (nearly flat while the weights
  read dominates, then linear once compute does);
- a plain sequence puts 1 token in the step, a speculative one ``K + 1`` (the verified
  drafts plus the bonus token), so speculation spends more compute per step;
- a speculative step adds the drafting cost: at one sequence it is the calibrated
  iteration cost minus the forward over ``K + 1`` tokens (single-stream figures stay as
  calibrated), and it grows by ``draft_ms_per_token`` per drafted token of each extra
  sequence;
- prefill tokens cost ``1/prefill_tok_s`` each inside the step; a step with no decoding
  sequence costs ``ttft_overhead_ms`` plus its prefill tokens (the single-stream time to
  first token). Prompts longer than ``max_num_batched_tokens`` minus the step's decode
  tokens are prefilled over several steps, delaying every other sequence's tokens.
"""

from __future__ import annotations

from vllm.sim import timing
from vllm.sim.profiles import Profile


def forward_seconds(profile: Profile, tokens: int) -> float:
    """One target forward pass over ``tokens`` decode/verify tokens (at least one)."""
    batch = profile.batching
    tokens = max(1, tokens)
    ms = batch.memory_ms_per_token * (tokens - 1)
    ms += batch.compute_ms_per_token * max(0, tokens - batch.compute_knee_tokens)
    return 1.0 / profile.baseline_tok_s + ms / 1000.0


def draft_seconds(profile: Profile, method: str | None, k: int, seqs: int) -> float:
    """Drafting K tokens for each of ``seqs`` sequences (0 without speculation)."""
    if not method or k <= 0 or seqs <= 0:
        return 0.0
    single = timing.iteration_seconds(profile, method, k) - forward_seconds(profile, k + 1)
    growth = profile.method(method).draft_ms_per_token * k * (seqs - 1) / 1000.0
    return max(0.0, single) + growth


def decode_tokens(method: str | None, k: int, seqs: int) -> int:
    """Tokens that ``seqs`` decoding sequences put into one step."""
    per_seq = k + 1 if method and k > 0 else 1
    return per_seq * seqs


def decode_seconds(profile: Profile, method: str | None, k: int, seqs: int) -> float:
    """A step in which ``seqs`` sequences decode (draft + verify) and nothing prefills."""
    return draft_seconds(profile, method, k, seqs) + forward_seconds(profile, decode_tokens(method, k, seqs))


def step_seconds(
    profile: Profile, method: str | None, k: int, decode_seqs: int, prefill_tokens: int
) -> float:
    """Cost of one engine step with ``decode_seqs`` decoding sequences and a prefill share."""
    prefill = prefill_tokens / profile.prefill_tok_s
    if decode_seqs <= 0:
        return profile.ttft_overhead_ms / 1000.0 + prefill
    return decode_seconds(profile, method, k, decode_seqs) + prefill


def aggregate_tok_s(
    profile: Profile, method: str | None, k: int, streams: int, block_size: int | None = None
) -> float:
    """Steady-state tokens per second of ``streams`` requests decoding together."""
    per_step = timing.tokens_per_iteration(profile, method, k, block_size)
    return streams * per_step / decode_seconds(profile, method, k, streams)


def per_stream_tok_s(
    profile: Profile, method: str | None, k: int, streams: int, block_size: int | None = None
) -> float:
    """Decode rate each of ``streams`` concurrent requests sees."""
    return aggregate_tok_s(profile, method, k, streams, block_size) / streams


def crossover_streams(
    profile: Profile, method: str, k: int, block_size: int | None = None, limit: int = 512
) -> int | None:
    """The smallest concurrency at which speculation no longer beats plain decode."""
    for streams in range(1, limit + 1):
        if aggregate_tok_s(profile, method, k, streams, block_size) <= aggregate_tok_s(
            profile, None, 0, streams
        ):
            return streams
    return None
