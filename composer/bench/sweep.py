"""The benchmark: warm single-stream decode speed, acceptance and correctness per (variant, K).

For each point of the sweep the server is made to serve it (a swap, supplied by the
caller), warm-up requests run uncounted (the first requests include JIT compilation and
graph capture), then the measured requests run one at a time at temperature 0 with
thinking off. Medians of the timings are reported; acceptance comes from /metrics deltas
around the measured requests; outputs are checked for determinism and against baseline.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from composer.bench.agreement import Agreement, agreement_with, deterministic
from composer.bench.client import ChatRequest, StreamResult, make_client, stream_chat
from composer.bench.metrics import Acceptance, acceptance, scrape
from composer.errors import BenchError, HealthCheckFailed, SwapFailed, UsageError
from composer.stack.model import Stack

Progress = Callable[[str], None]
DEFAULT_KS = (1, 3, 4, 7, 10)


@dataclass(frozen=True)
class BenchOptions:
    """How each point is measured."""

    prompts: tuple[str, ...]
    max_tokens: int = 512
    runs: int = 5
    warmup: int = 1
    request_timeout: float = 300.0

    def __post_init__(self) -> None:
        if not self.prompts:
            raise UsageError("the benchmark needs at least one prompt")
        if self.runs < 1 or self.warmup < 0 or self.max_tokens < 2:
            raise UsageError("--runs must be >= 1, --warmup >= 0 and --max-tokens >= 2")


@dataclass(frozen=True)
class BenchPoint:
    """One configuration to measure: a variant and its K (0 without speculation)."""

    variant: str
    method: str | None
    k: int

    @property
    def label(self) -> str:
        return self.variant if self.k == 0 else f"{self.variant} K={self.k}"


@dataclass
class PointResult:
    """Measurements of one point (or why it could not be measured)."""

    point: BenchPoint
    runs: list[StreamResult] = field(default_factory=list)
    acceptance: Acceptance | None = None
    texts: dict[int, list[str]] = field(default_factory=dict)
    error: str | None = None
    speedup: float | None = None
    agreement: Agreement | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.runs)

    def _median(self, values: Iterable[float]) -> float | None:
        values = list(values)
        return statistics.median(values) if values else None

    @property
    def decode_tok_s(self) -> float | None:
        return self._median(r.decode_tok_s for r in self.runs)

    @property
    def ttft_s(self) -> float | None:
        return self._median(r.ttft_s for r in self.runs)

    @property
    def e2e_s(self) -> float | None:
        return self._median(r.e2e_s for r in self.runs)

    @property
    def tokens_per_iteration(self) -> float:
        return self.acceptance.tokens_per_iteration if self.acceptance else 1.0

    @property
    def deterministic(self) -> bool | None:
        return deterministic(self.texts)

    def first_texts(self) -> dict[int, str]:
        """Each prompt's first output (prompt index -> text)."""
        return {i: texts[0] for i, texts in self.texts.items() if texts}


@dataclass
class BenchReport:
    """All points of a sweep plus what the checkpoints suggested."""

    results: list[PointResult]
    options: BenchOptions
    hints: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    interrupted: str = ""
    """Why the sweep stopped early (`interrupted at mtp K=7`), or empty when it ran to the end."""
    metadata: dict[str, object] = field(default_factory=dict)
    """What the results were measured with: tool version, stack hash, images, time, host."""

    def measured(self) -> list[PointResult]:
        """The points with measurements."""
        return [r for r in self.results if r.ok]

    def failed_points(self) -> list[PointResult]:
        """Points that were tried and failed (skipped points, known to be refused, are not)."""
        return [r for r in self.results if r.error is not None and not r.error.startswith("skipped:")]

    def baseline(self) -> PointResult | None:
        """The measured point without speculation (the reference), if any."""
        return next((r for r in self.results if r.point.k == 0 and r.ok), None)

    def best_k(self) -> dict[str, PointResult]:
        """Per speculative variant, the point with the highest median decode speed."""
        best: dict[str, PointResult] = {}
        for result in self.results:
            if result.point.k == 0 or not result.ok:
                continue
            current = best.get(result.point.variant)
            if current is None or (result.decode_tok_s or 0) > (current.decode_tok_s or 0):
                best[result.point.variant] = result
        return best


def plan_points(
    stack: Stack,
    variants: Sequence[str],
    ks: Sequence[int] | None,
    suggested: Mapping[str, int | None] | None = None,
) -> list[BenchPoint]:
    """The sweep: each variant once, each speculative variant once per K (pure).

    Without `ks`, a speculative variant gets DEFAULT_KS, its configured K and the K its
    checkpoint suggests (`suggested`, by variant name).
    """
    points: list[BenchPoint] = []
    for name in variants:
        variant = stack.variant(name)
        spec = variant.speculative
        if spec is None:
            points.append(BenchPoint(name, None, 0))
            continue
        hinted = (suggested or {}).get(name)
        defaults = {*DEFAULT_KS, spec.num_speculative_tokens, *([hinted] if hinted else [])}
        chosen = sorted(set(ks)) if ks else sorted(defaults)
        if any(k < 1 for k in chosen):
            raise UsageError(f"--k values must be positive integers, got {chosen}")
        points += [BenchPoint(name, spec.method, k) for k in chosen]
    return points


def k_override(point: BenchPoint) -> tuple[str, ...]:
    """The `--set` flags that render a speculative variant with the point's K."""
    if point.k == 0:
        return ()
    return (f"variants.{point.variant}.speculative.num_speculative_tokens={point.k}",)


class Eta:
    """Estimates the time left from the durations of the swaps and requests seen so far."""

    def __init__(self, points: int, requests_per_point: int) -> None:
        self.points_left = points
        self.requests_per_point = requests_per_point
        self.swaps: list[float] = []
        self.requests: list[float] = []

    def seconds_left(self, requests_left_in_point: int, swap_pending: bool = False) -> float | None:
        """Remaining seconds of the sweep, or None before any request was timed."""
        if not self.requests:
            return None
        per_request = statistics.fmean(self.requests)
        per_swap = statistics.fmean(self.swaps) if self.swaps else 0.0
        later = max(self.points_left - 1, 0)
        requests = requests_left_in_point + later * self.requests_per_point
        return requests * per_request + (later + swap_pending) * per_swap


def format_duration(seconds: float | None) -> str:
    """`about 1m05s left`, `about 42s left`, or `time left: estimating` when unknown."""
    if seconds is None:
        return "time left: estimating"
    seconds = round(seconds)
    return f"about {seconds // 60}m{seconds % 60:02d}s left" if seconds >= 60 else f"about {seconds}s left"


def measure_point(
    point: BenchPoint,
    options: BenchOptions,
    *,
    base_url: str,
    api_key: str | None,
    served_name: str,
    progress: Progress = lambda _: None,
    eta: Eta | None = None,
) -> PointResult:
    """Warm up, then time the measured requests and read acceptance from /metrics deltas."""
    request = ChatRequest(model=served_name, max_tokens=options.max_tokens)
    result = PointResult(point)
    total = options.warmup + options.runs
    with make_client(base_url, api_key, options.request_timeout) as client:
        for i in range(total):
            warm = i < options.warmup
            if i == options.warmup:
                before = scrape(client)
            index = 0 if warm else (i - options.warmup) % len(options.prompts)
            n = i - options.warmup + 1
            step = f"warm-up {i + 1}/{options.warmup}" if warm else f"run {n}/{options.runs}"
            left = eta.seconds_left(total - i) if eta else None
            progress(f"{point.label}: {step} ({format_duration(left)})")
            started = time.perf_counter()
            run = stream_chat(client, request, options.prompts[index])
            if eta:
                eta.requests.append(time.perf_counter() - started)
            result.texts.setdefault(index, []).append(run.text)
            if not warm:
                result.runs.append(run)
        delta = scrape(client) - before
    result.acceptance = acceptance(delta)
    served_k = round(delta.draft_tokens / delta.drafts) if delta.drafts > 0 else 0
    if served_k != point.k:
        raise BenchError(
            f"{point.label}: /metrics shows {served_k} draft token(s) per step during the measured runs, "
            f"not {point.k}: the server does not run what was swapped in "
            "(is NUM_SPECULATIVE_TOKENS set in the environment?)"
        )
    return result


def run_bench(
    points: Sequence[BenchPoint],
    options: BenchOptions,
    *,
    serve: Callable[[BenchPoint], None],
    base_url: str,
    api_key: str | None,
    served_name: str,
    progress: Progress = lambda _: None,
    hints: Sequence[str] = (),
    skip: Mapping[BenchPoint, str] | None = None,
) -> BenchReport:
    """Measure every point in order; `serve` makes the server serve a point (a swap).

    A point whose swap fails is recorded with its error and the sweep goes on; a point in
    `skip` (one the server is known to reject) is recorded with the reason, never swapped in.
    """
    report = BenchReport([], options, tuple(hints))
    skip = skip or {}
    eta = Eta(len(points) - len(skip), options.warmup + options.runs)
    point: BenchPoint | None = None
    try:
        for number, point in enumerate(points, 1):
            tag = f"[{number}/{len(points)}]"
            if point in skip:
                report.results.append(PointResult(point, error=f"skipped: {skip[point]}"))
                progress(f"{tag} {point.label}: skipped: {skip[point]}")
                continue
            left = eta.seconds_left(eta.requests_per_point, swap_pending=True)
            progress(f"{tag} {point.label}: starting ({format_duration(left)})")
            started = time.perf_counter()
            try:
                serve(point)
            except (SwapFailed, HealthCheckFailed) as err:
                if isinstance(err.__cause__, KeyboardInterrupt):  # the user wants out
                    raise KeyboardInterrupt from err
                report.results.append(PointResult(point, error=str(err)))
                progress(f"{tag} {point.label}: swap failed: {err}")
                eta.points_left -= 1
                continue
            eta.swaps.append(time.perf_counter() - started)
            result = measure_point(
                point,
                options,
                base_url=base_url,
                api_key=api_key,
                served_name=served_name,
                progress=lambda msg, t=tag: progress(f"{t} {msg}"),
                eta=eta,
            )
            eta.points_left -= 1
            report.results.append(result)
            rate = result.decode_tok_s
            progress(f"{tag} {point.label}: " + (f"{rate:.1f} tok/s" if rate else "no runs"))
    except KeyboardInterrupt:  # keep what was measured; the point in progress is dropped
        report.interrupted = f"interrupted at {point.label}" if point else "interrupted"
        report.notes.append(
            f"{report.interrupted}: {len(report.measured())} of {len(points)} point(s) measured"
        )
    compare_with_baseline(report)
    return report


def compare_with_baseline(report: BenchReport) -> None:
    """Fill in speed-up and output agreement against the baseline point."""
    base = report.baseline()
    if base is None:
        report.notes.append("no baseline point was measured: no speed-up or agreement")
        return
    reference = base.first_texts()
    for result in report.results:
        if not result.ok:
            continue
        if base.decode_tok_s:
            result.speedup = (result.decode_tok_s or 0.0) / base.decode_tok_s
        if result is not base:
            result.agreement = agreement_with(result.first_texts(), reference)
