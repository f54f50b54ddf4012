"""Pure timing model: what the simulator promises for (profile, method, K).

Formulas (times unscaled; the server divides every duration by SIM_TIME_SCALE):

- plain decode: one token per step of ``1 / baseline_tok_s`` seconds;
- speculative decode: each iteration drafts K tokens and costs ``iteration_seconds``;
  it yields ``a + 1`` tokens where ``a`` is the accepted prefix length and
  ``P(a > i) = p_i`` (per-position unconditional acceptance), so the mean tokens per
  iteration is ``1 + sum(p_i)`` and the decode rate is that mean over the iteration cost;
- time to first token: ``ttft_overhead_ms + prompt_tokens / prefill_tok_s`` (speculation
  does not change it).

Import as ``from vllm.sim import timing`` (put images/sim/src on ``sys.path``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from vllm.sim.profiles import MethodProfile, Profile

_MAX_P = 0.99
_MIN_ITERATION_MS = 0.1


def _extend(values: Sequence[float], length: int, tail_ratio: float) -> list[float]:
    """Truncate, or extend geometrically with the last ratio (or ``tail_ratio``)."""
    out = list(values[:length])
    has_ratio = len(values) >= 2 and values[-2] > 0
    ratio = min(values[-1] / values[-2], 1.0) if has_ratio else tail_ratio
    while len(out) < length:
        out.append(out[-1] * ratio if out else _MAX_P)
    return out


def _monotone(values: Sequence[float]) -> tuple[float, ...]:
    """Clamp to [0, 0.99] and make non-increasing (accepted positions form a prefix)."""
    out: list[float] = []
    ceiling = _MAX_P
    for value in values:
        ceiling = min(ceiling, max(0.0, value))
        out.append(ceiling)
    return tuple(out)


def _table_acceptance(method: MethodProfile, k: int) -> list[float]:
    """Per-position acceptance at K from the per-K tables (interpolated between them)."""
    table = method.acceptance
    ks = sorted(table)
    if k in table:
        return list(table[k])
    lower = [x for x in ks if x < k]
    upper = [x for x in ks if x > k]
    if not lower:
        return _extend(table[upper[0]], k, method.tail_ratio)
    low = _extend(table[lower[-1]], k, method.tail_ratio)
    if not upper:
        return low
    high = list(table[upper[0]][:k])
    weight = (k - lower[-1]) / (upper[0] - lower[-1])
    return [a + (b - a) * weight for a, b in zip(low, high, strict=True)]


def block_factor(method: MethodProfile, k: int, block_size: int | None) -> float:
    """Acceptance multiplier when the drafter's block size differs from the calibration."""
    if method.block_size is None or block_size is None or block_size == method.block_size:
        return 1.0
    extra = abs(k + 1 - block_size) - abs(k + 1 - method.block_size)
    return float(method.block_mismatch_decay**extra)


def acceptance(profile: Profile, method: str, k: int, block_size: int | None = None) -> tuple[float, ...]:
    """Per-position unconditional acceptance p_0..p_{K-1} (non-increasing)."""
    if k <= 0:
        return ()
    calib = profile.method(method)
    factor = block_factor(calib, k, block_size)
    return _monotone([p * factor for p in _table_acceptance(calib, k)])


def tokens_per_iteration(
    profile: Profile, method: str | None, k: int, block_size: int | None = None
) -> float:
    """Mean tokens per decode iteration: ``1 + sum(p_i)`` (1.0 without speculation)."""
    if not method or k <= 0:
        return 1.0
    return 1.0 + sum(acceptance(profile, method, k, block_size))


def _piecewise_linear(points: Mapping[int, float], k: int) -> float:
    ks = sorted(points)
    if len(ks) == 1:
        return points[ks[0]]
    if k <= ks[0]:
        left, right = ks[0], ks[1]
    elif k >= ks[-1]:
        left, right = ks[-2], ks[-1]
    else:
        left = max(x for x in ks if x <= k)
        right = min(x for x in ks if x > left)
    slope = (points[right] - points[left]) / (right - left)
    return points[left] + slope * (k - left)


def _cost_points(calib: MethodProfile) -> dict[int, float]:
    points: dict[int, float] = {}
    for k, rate in calib.tok_s.items():
        mean = 1.0 + sum(_monotone(_table_acceptance(calib, k)))
        points[k] = 1000.0 * mean / rate
    points.update(calib.iteration_ms)
    if not points:
        raise ValueError("a method profile needs 'tok_s' or 'iteration_ms'")
    return points


def iteration_seconds(profile: Profile, method: str | None, k: int) -> float:
    """Cost of one decode iteration (draft K + verify), unscaled seconds.

    Without speculation this is one plain decode step. Piecewise linear in K between the
    calibration points, extended linearly beyond them (so a linear cost, like MTP's
    recursive head, needs only two points).
    """
    if not method or k <= 0:
        return 1.0 / profile.baseline_tok_s
    ms = _piecewise_linear(_cost_points(profile.method(method)), k)
    return max(ms, _MIN_ITERATION_MS) / 1000.0


def decode_tok_s(profile: Profile, method: str | None, k: int, block_size: int | None = None) -> float:
    """Expected steady-state single-stream decode rate (tokens per unscaled second)."""
    return tokens_per_iteration(profile, method, k, block_size) / iteration_seconds(profile, method, k)


def acceptance_rate(profile: Profile, method: str, k: int, block_size: int | None = None) -> float:
    """Accepted / drafted tokens: ``sum(p_i) / K``."""
    if k <= 0:
        return 0.0
    return sum(acceptance(profile, method, k, block_size)) / k


def ttft_seconds(profile: Profile, prompt_tokens: int) -> float:
    """Time to first token (prefill), unscaled seconds."""
    return profile.ttft_overhead_ms / 1000.0 + prompt_tokens / profile.prefill_tok_s
