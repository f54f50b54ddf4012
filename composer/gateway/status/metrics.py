"""The gateway's Prometheus metrics, in a registry of their own (served at /gateway/metrics).

Each metric is defined once in `Metrics` with its help text (docs/gateway.md lists them);
counters end in `_total` on the wire. Labelled series start at zero for every value their
label can take (`REFUSAL_REASONS`, `CONNECTION_CLOSE_REASONS`, `CONTINUATION_REFUSALS`,
`routing.REASONS`, ...). The `upstream` label of the `gateway_live_*` series is a live
upstream's name (`mtp/2`): they come only from the gateway's settings and the control channel
(at most 64), and an upstream's series go when it leaves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from composer.gateway.routing.routing import REASONS as ROUTE_REASONS

CONTINUATION_REFUSALS = (
    "n",
    "best_of",
    "echo",
    "prompt_logprobs",
    "structured_output",
    "tools",
    "tool_call",
    "penalties",
    "max_model_len",
    "reasoning",
    "logprobs",
    "batch",
    "max_tokens",
    "no_token_ids",
    "format",
)

REFUSAL_REASONS = (
    "hold_timeout",
    "queue_full",
    "unauthorized",
    "dev_route",
    "not_found",
    "bad_path",
    "duplicate_authorization",
    "not_ready",
    "residency",
    "switch_failed",
    "no_follower",
    "stopping",
    "abandoned",
)
CONNECTION_CLOSE_REASONS = ("head_too_large", "head_timeout", "body_timeout", "evicted", "over_capacity")
SWITCH_REASONS = ("alias", "auto")
SLEEP_RESULTS = ("ok", "failed")
PAUSE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120, float("inf"))
HOLD_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, float("inf"))


class Metrics:
    """Every gateway metric, bound to one registry so several gateways can live in one process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        counter, gauge = self._counter, self._gauge
        self.held = gauge("gateway_held_requests", "Requests waiting now")
        self.hold_seconds = self._histogram(
            "gateway_hold_seconds", "Seconds each held request waited", HOLD_BUCKETS
        )
        self.inflight = gauge("gateway_inflight_requests", "Requests forwarded and not finished")
        self.forwarded = counter("gateway_requests", "Requests forwarded to the backend")
        self.drained = counter("gateway_drained_requests", "In-flight requests finished during a drain")
        self.cut = counter("gateway_cut_requests", "In-flight requests cut by a drain timeout")
        self.stalled = counter(
            "gateway_stalled_streams", "Streams ended after stall_timeout without bytes from the backend"
        )
        self.refused = counter(
            "gateway_refused_requests", "Requests refused by the gateway", "reason", REFUSAL_REASONS
        )
        self.retries = counter(
            "gateway_upstream_retries", "Requests sent again: the backend did not read them"
        )
        self.upstream_errors = counter("gateway_upstream_errors", "Backend failures seen by clients")
        self.connections = gauge("gateway_open_connections", "Client connections open")
        self.connections_closed = counter(
            "gateway_connections_closed",
            "Client connections the gateway closed",
            "reason",
            CONNECTION_CLOSE_REASONS,
        )
        self.routes = counter("gateway_routes", "Upstream changes through the control channel")
        self.drains = counter("gateway_drains", "Drains run")
        self.hold_active = gauge("gateway_hold_active", "1 while a control hold is set")
        self.backend_ready = gauge("gateway_backend_ready", "1 while the backend is ready")
        self.backend_info = gauge("gateway_backend_info", "1 for the upstream served now", "upstream")

        self.sleeps = counter("gateway_sleeps", "Backend /sleep calls", "result", SLEEP_RESULTS)
        self.wakes = counter("gateway_wakes", "Backend /wake_up calls", "result", SLEEP_RESULTS)
        self.waking = gauge("gateway_waking", "1 while a /wake_up runs")

        self.switch_demands = counter(
            "gateway_switch_demands", "Switch demands raised", "reason", SWITCH_REASONS
        )
        self.switches = counter(
            "gateway_switches",
            "Switch demands answered by the host",
            ("reason", "outcome"),
            [(reason, outcome) for reason in SWITCH_REASONS for outcome in ("ok", "failed")],
        )
        self.switch_withdrawn = counter(
            "gateway_switch_withdrawn", "Automatic demands dropped before the host took them"
        )
        self._serving: set[str] = set()
        self.serving_info = gauge(
            "gateway_serving_variant_info", "1 for the variant reported serving", "variant"
        )

        self.live_requests = counter(
            "gateway_live_requests", "Requests forwarded to each live upstream", "upstream"
        )
        self.live_outstanding = gauge(
            "gateway_live_outstanding", "Requests in flight on each live upstream", "upstream"
        )
        self.live_errors = counter("gateway_live_errors", "Failed requests per live upstream", "upstream")
        self.live_ready = gauge(
            "gateway_live_ready", "1 while a live upstream passes its health check", "upstream"
        )
        self.route_decisions = counter(
            "gateway_route_decisions", "Live routing decisions by reason", "reason", ROUTE_REASONS
        )

        self.continued = counter("gateway_continued_streams", "Broken streams continued on another upstream")
        self.continuation_refused = counter(
            "gateway_continuation_refused",
            "Streams that will not be continued",
            "reason",
            CONTINUATION_REFUSALS,
        )
        self.continuation_failed = counter(
            "gateway_continuation_failed", "Broken streams that could not be continued"
        )
        self.continuation_pause = self._histogram(
            "gateway_continuation_pause_seconds", "The pause each continued stream saw", PAUSE_BUCKETS
        )

    def _counter(
        self, name: str, text: str, labels: str | tuple[str, ...] = (), values: Iterable[Any] = ()
    ) -> Counter:
        """A counter in this registry; the series of `values` (label values) start at zero."""
        metric = Counter(name, text, [labels] if isinstance(labels, str) else labels, registry=self.registry)
        for value in values:
            metric.labels(*(value if isinstance(value, tuple) else (value,)))
        return metric

    def _histogram(self, name: str, text: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(name, text, buckets=buckets, registry=self.registry)

    def _gauge(self, name: str, text: str, label: str = "") -> Gauge:
        return Gauge(name, text, [label] if label else [], registry=self.registry)

    def refused_counts(self) -> dict[str, float]:
        """`gateway_refused_requests_total` by reason (the /state and status views)."""
        return {
            s.labels["reason"]: s.value
            for metric in self.refused.collect()
            for s in metric.samples
            if s.name.endswith("_total")
        }

    def live_added(self, name: str) -> None:
        """Create a live upstream's series (zero)."""
        for metric in (self.live_requests, self.live_outstanding, self.live_errors, self.live_ready):
            metric.labels(name)

    def live_removed(self, name: str) -> None:
        """Drop a live upstream's series once it has left the set and drained."""
        for metric in (self.live_requests, self.live_outstanding, self.live_errors, self.live_ready):
            with contextlib.suppress(KeyError):
                metric.remove(name)

    def count_sleep_call(self, path: str, ok: bool) -> None:
        """Count a backend `/sleep` or `/wake_up` call (other paths are not counted)."""
        counter = {"/sleep": self.sleeps, "/wake_up": self.wakes}.get(path)
        if counter is not None:
            counter.labels("ok" if ok else "failed").inc()

    def set_serving(self, variants: Sequence[str]) -> None:
        """Point `gateway_serving_variant_info` at the variants that serve now."""
        for old in self._serving - set(variants):
            with contextlib.suppress(KeyError):
                self.serving_info.remove(old)
        self._serving = set(variants)
        for variant in variants:
            self.serving_info.labels(variant).set(1)

    def set_upstream(self, old: str | None, new: str) -> None:
        """Point `gateway_backend_info` at the new upstream."""
        if old is not None and old != new:
            self.backend_info.remove(old)
        self.backend_info.labels(new).set(1)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
