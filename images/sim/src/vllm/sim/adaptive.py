"""In-server adaptive speculation: what it costs and gains per engine step (pure).

Calibrated on published figures, not measured here (see images/sim/README.md):

- dynamic speculative decoding (``num_speculative_tokens_per_batch_size``) picks K from
  the number of running sequences each step. On the V1 model runner vLLM then falls back
  to piecewise CUDA graphs: a speculative step costs ``PIECEWISE_SLOWDOWN`` times its
  full-graph cost (vllm#49548: 59.6 -> 50.0 tok/s single stream, x1.192);
- a K=0 step of such a server still costs more than plain decode: ``1 + k0_tax(n)``
  times a plain step, +6.6% at 2 sequences and +21.6% at 189 (same thread), linear in
  log(n) between them and held flat outside;
- adaptive verification (``enable_adaptive_verification``, V2 runner) divides a
  speculative step's cost by ``1 + adaptive_gain(n)``: -8% at 1 sequence (SGLang's
  similar scheme cost 4-8% at 1-8), -4% at 8, 0 at 16, +9% at 32 and +18.5% from 64
  on (the published +15% to +22% at concurrency 64), linear in log2(n);
- hybrid linear-attention models with MTP reserve an extra state block per sequence,
  and the scheduler runs only about ``HYBRID_SPEC_MAX_SEQS`` = 3 at a time (vllm#55533).
The aggregate collapse reported at a schedule's threshold (vllm#49548) is not modelled.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from vllm.sim import batching, timing
from vllm.sim.engine_types import SpecSetup
from vllm.sim.profiles import Profile

PIECEWISE_SLOWDOWN = 59.6 / 50.0
K0_TAX_POINTS: tuple[tuple[int, float], ...] = ((2, 0.066), (189, 0.216))
ADAPTIVE_GAIN_POINTS: tuple[tuple[int, float], ...] = (
    (1, -0.08),
    (8, -0.04),
    (16, 0.0),
    (32, 0.09),
    (64, 0.185),
)
HYBRID_SPEC_MAX_SEQS = 3
HYBRID_CAPPED_METHODS = frozenset({"mtp"})

Schedule = tuple[tuple[int, int, int], ...]


def _log_interp(points: Sequence[tuple[int, float]], n: int) -> float:
    """Linear in log(n) between the points, flat outside them."""
    if n <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if n <= x1:
            return y0 + (y1 - y0) * (math.log(n) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return points[-1][1]


def k0_tax(seqs: int) -> float:
    """Extra share of a plain step that a K=0 step of a dynamic-SD server costs."""
    return _log_interp(K0_TAX_POINTS, max(1, seqs))


def adaptive_gain(seqs: int) -> float:
    """Throughput gain (negative: cost) of adaptive verification at ``seqs`` sequences."""
    return _log_interp(ADAPTIVE_GAIN_POINTS, max(1, seqs))


def k_at(schedule: Schedule | None, k_max: int, seqs: int) -> int:
    """The K a step with ``seqs`` decoding sequences uses (vLLM: carried forward, capped)."""
    if not schedule:
        return k_max
    k = schedule[0][2]
    for start, end, value in schedule:
        if start > seqs:
            break
        k = value
        if seqs <= end:
            break
    return min(k, k_max)


def decode_factor(*, dynamic: bool, piecewise: bool, adaptive: bool, k: int, seqs: int) -> float:
    """Multiplier on the modelled decode cost of one step (1.0: as calibrated)."""
    if seqs <= 0:
        return 1.0
    if k <= 0:
        return 1.0 + k0_tax(seqs) if dynamic else 1.0
    factor = PIECEWISE_SLOWDOWN if dynamic and piecewise else 1.0
    if adaptive:
        factor /= 1.0 + adaptive_gain(seqs)
    return factor


def max_running(method: str | None, hybrid: bool, max_num_seqs: int) -> int:
    """Sequences the scheduler runs at once (capped for speculative hybrid models)."""
    if hybrid and method in HYBRID_CAPPED_METHODS:
        return min(max_num_seqs, HYBRID_SPEC_MAX_SEQS)
    return max_num_seqs


def is_hybrid(target_config: dict) -> bool:
    """True when the checkpoint mixes linear-attention (GDN) layers with full attention."""
    for section in (target_config.get("text_config") or {}, target_config):
        types = section.get("layer_types")
        if isinstance(types, list) and "linear_attention" in types:
            return True
        interval = section.get("full_attention_interval")
        if isinstance(interval, int) and interval > 1 and section.get("linear_num_value_heads"):
            return True
    return False


def aggregate_tok_s(
    profile: Profile, setup: SpecSetup, streams: int, max_num_seqs: int | None = None
) -> float:
    """The model's steady-state decode tokens per second of ``streams`` requests together.

    Only ``max_running`` of them run at once (the rest wait), each step drafts the
    schedule's K for the running batch, and its cost carries the factors above.
    """
    limit = max_num_seqs or profile.batching.max_num_seqs
    seqs = min(max(1, streams), max_running(setup.method, setup.hybrid, limit))
    k = k_at(setup.schedule, setup.k, seqs) if setup.enabled else 0
    method = setup.method if k > 0 else None
    per_step = 1.0
    if method is not None:
        per_step += sum(timing.acceptance(profile, method, setup.k, setup.block_size)[:k])
    factor = decode_factor(
        dynamic=setup.schedule is not None and setup.enabled,
        piecewise=setup.piecewise,
        adaptive=setup.adaptive,
        k=k,
        seqs=seqs,
    )
    return seqs * per_step / (batching.decode_seconds(profile, method, k, seqs) * factor)
