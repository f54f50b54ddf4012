"""The benchmark: warm decode speed, acceptance and correctness per (variant, K) and workload.

Each point is swapped in by the caller; then each workload (prompt length x streams) is
measured: uncounted warm-up requests one at a time (JIT, graph capture), then greedy
requests, `runs` back to back on each of N streams at once. Per-request figures are medians
and 95th percentiles; the aggregate rate is every completion token over the measured window
(first request sent to last one finished). Acceptance comes from /metrics deltas around the
measured requests; outputs are checked for determinism and against the workload's baseline.

Correctness: streaming deltas carry no token ids, so outputs are compared as word pieces
(non-space runs with the whitespace before them, close to a tokenizer's split for prose).
Agreement is the positions where both outputs hold the same piece over the longer one's
length (a missing or extra tail disagrees); over several prompts matches and lengths are
summed first. The first differing position is reported too: in greedy decoding one flipped
token changes everything after it.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from composer.bench.client import (
    Acceptance,
    ChatRequest,
    RunningSampler,
    SpecCounters,
    StreamResult,
    acceptance,
    make_client,
    run_streams,
    scrape,
    stream_chat,
)
from composer.bench.prompts import padded
from composer.errors import BenchError, HealthCheckFailed, SwapFailed, UsageError
from composer.stack.model import Stack

_PIECE = re.compile(r"\s*\S+")


def pieces(text: str) -> list[str]:
    """A text split into word pieces (leading whitespace attached; trailing space dropped)."""
    return _PIECE.findall(text)


@dataclass(frozen=True)
class Agreement:
    """How far an output agrees with a reference output."""

    matched: int
    compared: int
    first_difference: int | None

    @property
    def percent(self) -> float:
        """Matched pieces over compared pieces, in percent (100 for two empty texts)."""
        return 100.0 if self.compared == 0 else 100.0 * self.matched / self.compared


def agreement(output: str, reference: str) -> Agreement:
    """Position-wise piece agreement of `output` with `reference`."""
    out, ref = pieces(output), pieces(reference)
    matched = sum(1 for a, b in zip(out, ref, strict=False) if a == b)
    first = next((i for i, (a, b) in enumerate(zip(out, ref, strict=False)) if a != b), None)
    if first is None and len(out) != len(ref):
        first = min(len(out), len(ref))
    return Agreement(matched, max(len(out), len(ref)), first)


def agreement_with(outputs: Mapping[str, str], reference: Mapping[str, str]) -> Agreement | None:
    """Agreement summed over the prompts both have (earliest first difference); None if none."""
    parts = [agreement(outputs[p], reference[p]) for p in outputs if p in reference]
    if not parts:
        return None
    firsts = [a.first_difference for a in parts if a.first_difference is not None]
    return Agreement(sum(a.matched for a in parts), sum(a.compared for a in parts), min(firsts, default=None))


def deterministic(texts_by_prompt: Mapping[str, Sequence[str]]) -> bool | None:
    """True when every prompt sent more than once gave one text; None if none was repeated."""
    repeated = [texts for texts in texts_by_prompt.values() if len(texts) > 1]
    if not repeated:
        return None
    return all(len(set(texts)) == 1 for texts in repeated)


Progress = Callable[[str], None]
DEFAULT_KS = (1, 3, 4, 7, 10)


@dataclass(frozen=True)
class Workload:
    """A prompt length (None: the prompts as given) and a number of concurrent streams."""

    prompt_tokens: int | None = None
    concurrency: int = 1

    @property
    def label(self) -> str:
        prompt = "prompts as given" if self.prompt_tokens is None else f"{self.prompt_tokens} tok"
        return f"{prompt} x {self.concurrency} stream{'s' if self.concurrency > 1 else ''}"


SINGLE_STREAM = Workload()


@dataclass(frozen=True)
class BenchOptions:
    """How each point is measured; the workloads are every prompt length x every concurrency."""

    prompts: tuple[str, ...]
    max_tokens: int = 512
    runs: int = 5
    warmup: int = 1
    request_timeout: float = 300.0
    concurrency: tuple[int, ...] = (1,)
    prompt_tokens: tuple[int | None, ...] = (None,)

    def __post_init__(self) -> None:
        if not self.prompts:
            raise UsageError("the benchmark needs at least one prompt")
        if self.runs < 1 or self.warmup < 0 or self.max_tokens < 2:
            raise UsageError("--runs must be >= 1, --warmup >= 0 and --max-tokens >= 2")
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise UsageError(f"--concurrency values must be positive integers, got {list(self.concurrency)}")
        if not self.prompt_tokens or any(t is not None and t < 1 for t in self.prompt_tokens):
            shown = list(self.prompt_tokens)
            raise UsageError(f"--prompt-tokens values must be positive integers, got {shown}")

    def workloads(self) -> list[Workload]:
        """Every prompt length x every concurrency, in the order given (duplicates dropped)."""
        cells = [Workload(t, c) for t in self.prompt_tokens for c in self.concurrency]
        return list(dict.fromkeys(cells))

    def prompts_for(self, workload: Workload) -> tuple[str, ...]:
        """The prompts of a workload: padded to its length when it has one."""
        if workload.prompt_tokens is None:
            return self.prompts
        return tuple(padded(p, workload.prompt_tokens) for p in self.prompts)

    @property
    def multi(self) -> bool:
        """True when anything but today's single-stream, prompts-as-given run is measured."""
        return self.workloads() != [SINGLE_STREAM]


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between ranks; None when empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Iterable[float]) -> float | None:
    """The median; None when empty."""
    values = list(values)
    return statistics.median(values) if values else None


def latency(decode_rates: Iterable[float | None], ttfts: Iterable[float]) -> dict[str, float | None]:
    """p50/p95 TPOT (ms: 1000 / decode tok/s, zero rates left out) and TTFT (s) of requests."""
    tpots = [1000.0 / r for r in decode_rates if r]
    ttfts = list(ttfts)
    return {
        "tpot_p50_ms": median(tpots),
        "tpot_p95_ms": percentile(tpots, 95),
        "ttft_p50_s": median(ttfts),
        "ttft_p95_s": percentile(ttfts, 95),
    }


def rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def point_label(variant: str, k: int) -> str:
    """`mtp K=7`, or the variant alone without speculation (K 0)."""
    return variant if k == 0 else f"{variant} K={k}"


@dataclass(frozen=True)
class BenchPoint:
    """One configuration to measure: a variant and its K (0 without speculation)."""

    variant: str
    method: str | None
    k: int

    @property
    def label(self) -> str:
        return point_label(self.variant, self.k)


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
    workload: Workload = SINGLE_STREAM
    wall_s: float | None = None
    """The measured window: first measured request sent to last one finished."""
    aggregate_speedup: float | None = None
    max_running: int | None = None
    """The most sequences `/metrics` showed running at once during the measured window."""

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.runs)

    @property
    def decode_tok_s(self) -> float | None:
        return median(r.decode_tok_s for r in self.runs)

    @property
    def ttft_s(self) -> float | None:
        return median(r.ttft_s for r in self.runs)

    @property
    def e2e_s(self) -> float | None:
        return median(r.e2e_s for r in self.runs)

    @property
    def aggregate_tok_s(self) -> float | None:
        """Every completion token of the measured requests over the measured window."""
        if not self.runs or not self.wall_s:
            return None
        return sum(r.completion_tokens for r in self.runs) / self.wall_s

    @property
    def ttft_p95_s(self) -> float | None:
        return percentile((r.ttft_s for r in self.runs), 95)

    @property
    def e2e_p95_s(self) -> float | None:
        return percentile((r.e2e_s for r in self.runs), 95)

    @property
    def label(self) -> str:
        """The point, with its workload when it is not the single-stream default."""
        if self.workload == SINGLE_STREAM:
            return self.point.label
        return f"{self.point.label} [{self.workload.label}]"

    @property
    def tokens_per_iteration(self) -> float:
        return self.acceptance.tokens_per_iteration if self.acceptance else 1.0

    @property
    def deterministic(self) -> bool | None:
        return deterministic(self.texts)


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
    swap_seconds: list[float] = field(default_factory=list)
    """How long each successful swap took (the switch cost `bench --decide` charges)."""

    def measured(self) -> list[PointResult]:
        return [r for r in self.results if r.ok]

    def failed_points(self) -> list[PointResult]:
        """Points that were tried and failed (skipped points, known to be refused, are not)."""
        return [r for r in self.results if r.error is not None and not r.error.startswith("skipped:")]

    def first_workload(self) -> Workload:
        """The workload the best K and the plain table speak of (the first one measured)."""
        return self.options.workloads()[0]

    def baseline(self, workload: Workload | None = None) -> PointResult | None:
        """The measured point without speculation (the reference) of a workload, if any."""
        workload = workload or self.first_workload()
        return next((r for r in self.results if r.point.k == 0 and r.ok and r.workload == workload), None)

    def best_k(self) -> dict[str, PointResult]:
        """Per speculative variant, the point with the highest median decode speed (first workload)."""
        runs = [r for r in self.results if r.point.k and r.ok and r.workload == self.first_workload()]
        by_variant = {r.point.variant: [o for o in runs if o.point.variant == r.point.variant] for r in runs}
        return {v: max(rs, key=lambda r: r.decode_tok_s or 0) for v, rs in by_variant.items()}


def plan_points(
    stack: Stack,
    variants: Sequence[str],
    ks: Sequence[int] | None,
    suggested: Mapping[str, int | None] | None = None,
    ks_by_variant: Mapping[str, Sequence[int]] | None = None,
) -> list[BenchPoint]:
    """Each variant once, each speculative one once per K: `ks`, else DEFAULT_KS, its own K
    and its `suggested` K; `ks_by_variant` overrides both (`bench --decide`)."""
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
        if ks_by_variant and name in ks_by_variant:
            chosen = sorted(set(ks_by_variant[name]))
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
    workload: Workload = SINGLE_STREAM,
) -> PointResult:
    """Warm up, then time one workload's measured requests and read acceptance from /metrics."""
    request = ChatRequest(model=served_name, max_tokens=options.max_tokens)
    prompts = options.prompts_for(workload)
    result = PointResult(point, workload=workload)
    label = result.label
    with make_client(base_url, api_key, options.request_timeout) as client:
        for i in range(options.warmup):
            left = eta.seconds_left(_requests(options, workload) - i) if eta else None
            progress(f"{label}: warm-up {i + 1}/{options.warmup} ({format_duration(left)})")
            run = _timed(client, request, prompts[0], eta)
            result.texts.setdefault(0, []).append(run.text)
        before = scrape(client)
        if workload.concurrency == 1:
            started = time.perf_counter()
            for n in range(options.runs):
                left = eta.seconds_left(options.runs - n) if eta else None
                progress(f"{label}: run {n + 1}/{options.runs} ({format_duration(left)})")
                index = n % len(prompts)
                run = _timed(client, request, prompts[index], eta)
                result.texts.setdefault(index, []).append(run.text)
                result.runs.append(run)
            result.wall_s = time.perf_counter() - started
            result.max_running = 1  # one stream, one request at a time
        else:
            with RunningSampler(base_url) as sampler:
                _measure_streams(result, options, request, prompts, base_url, api_key, progress, eta)
            result.max_running = sampler.peak
        delta = scrape(client) - before
    _check_acceptance(result, delta)
    return result


def _requests(options: BenchOptions, workload: Workload) -> int:
    return options.warmup + options.runs * workload.concurrency


def _timed(client, request: ChatRequest, prompt: str, eta: Eta | None, share: int = 1) -> StreamResult:
    started = time.perf_counter()
    run = stream_chat(client, request, prompt)
    if eta:
        eta.requests.append((time.perf_counter() - started) / share)
    return run


def _measure_streams(
    result: PointResult,
    options: BenchOptions,
    request: ChatRequest,
    prompts: tuple[str, ...],
    base_url: str,
    api_key: str | None,
    progress: Progress,
    eta: Eta | None,
) -> None:
    """N streams started together, each sending `runs` requests back to back; stream s sends
    prompt (j * N + s) mod len(prompts) as its j-th. An error or interrupt stops them all."""
    streams = result.workload.concurrency
    total = streams * options.runs
    lock = threading.Lock()
    stop = threading.Event()
    barrier = threading.Barrier(streams)
    clients = [make_client(base_url, api_key, options.request_timeout) for _ in range(streams)]
    window: list[float] = []
    done: list[tuple[int, StreamResult]] = []

    def stream(s: int) -> None:
        barrier.wait(timeout=options.request_timeout)
        for j in range(options.runs):
            if stop.is_set():
                return
            index = (j * streams + s) % len(prompts)
            started = time.perf_counter()
            run = _timed(clients[s], request, prompts[index], eta, share=streams)
            with lock:
                window.extend((started, time.perf_counter()))
                done.append((index, run))
                left = eta.seconds_left(total - len(done)) if eta else None
                progress(f"{result.label}: run {len(done)}/{total} ({format_duration(left)})")

    run_streams(streams, stream, clients, stop, "bench-stream", barrier.abort)
    for index, run in done:
        result.texts.setdefault(index, []).append(run.text)
        result.runs.append(run)
    result.wall_s = max(window) - min(window)


def _check_acceptance(result: PointResult, delta: SpecCounters) -> None:
    """Fill in acceptance; BenchError when the server drafts another K than the point's."""
    point = result.point
    result.acceptance = acceptance(delta)
    if delta.accepted_per_pos:  # vLLM labels positions 0..K-1 from the start
        served_k = len(delta.accepted_per_pos)
    else:  # no per-position counter: the mean draft length (methods such as ngram may draft less)
        served_k = round(delta.draft_tokens / delta.drafts) if delta.drafts > 0 else 0
    if served_k != point.k:
        raise BenchError(
            f"{point.label}: /metrics shows {served_k} draft token(s) per step during the measured runs, "
            f"not {point.k}: the server does not run what was swapped in "
            "(is NUM_SPECULATIVE_TOKENS set in the environment?)"
        )


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
    """Measure every point in order, `serve` swapping each in; a failed swap is recorded and
    the sweep goes on; a point in `skip` is recorded with its reason, never swapped in."""
    report = BenchReport([], options, tuple(hints))
    skip = skip or {}
    workloads = options.workloads()
    eta = Eta(len(points) - len(skip), sum(_requests(options, w) for w in workloads))
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
            report.swap_seconds.append(eta.swaps[-1])
            measured = []
            for workload in workloads:
                result = measure_point(
                    point,
                    options,
                    base_url=base_url,
                    api_key=api_key,
                    served_name=served_name,
                    progress=lambda msg, t=tag: progress(f"{t} {msg}"),
                    eta=eta,
                    workload=workload,
                )
                measured.append(result)
                rate, total = result.decode_tok_s, result.aggregate_tok_s
                summary = f"{rate:.1f} tok/s" if rate else "no runs"
                if workload.concurrency > 1 and total:
                    summary += f" per request, {total:.1f} tok/s in all"
                progress(f"{tag} {result.label}: {summary}")
            eta.points_left -= 1
            report.results += measured
    except KeyboardInterrupt:  # keep what was measured; the point in progress is dropped
        report.interrupted = f"interrupted at {point.label}" if point else "interrupted"
        report.notes.append(
            f"{report.interrupted}: {len(report.measured())} of {len(points)} point(s) measured"
        )
    compare_with_baseline(report)
    return report


def compare_with_baseline(report: BenchReport) -> None:
    """Fill in speed-ups and output agreement against the baseline point of the same workload."""
    if report.baseline() is None:
        report.notes.append("no baseline point was measured: no speed-up or agreement")
    for result in report.results:
        base = report.baseline(result.workload)
        if not result.ok or base is None:
            continue
        if base.decode_tok_s:
            result.speedup = (result.decode_tok_s or 0.0) / base.decode_tok_s
        if base.aggregate_tok_s:
            result.aggregate_speedup = (result.aggregate_tok_s or 0.0) / base.aggregate_tok_s
        if result is not base:  # each prompt's first output against the baseline's
            firsts = [{i: texts[0] for i, texts in r.texts.items() if texts} for r in (result, base)]
            result.agreement = agreement_with(*firsts)
