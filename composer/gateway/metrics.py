"""The gateway's Prometheus metrics, in a registry of their own (served at /gateway/metrics).

| metric | type | meaning |
|---|---|---|
| `gateway_held_requests` | gauge | requests waiting now (backend not ready or a hold is set) |
| `gateway_hold_seconds` | histogram | how long each held request waited |
| `gateway_inflight_requests` | gauge | requests forwarded to the backend and not finished |
| `gateway_requests_total` | counter | requests forwarded to the backend |
| `gateway_drained_requests_total` | counter | in-flight requests that finished during a drain |
| `gateway_cut_requests_total` | counter | in-flight requests cut because a drain timed out |
| `gateway_refused_requests_total{reason}` | counter | `hold_timeout` (503), `queue_full` (429), |
|  |  | `unauthorized` (401), `dev_route` (404), `not_found` (404: not on the allow-list), |
|  |  | `bad_path` (400), `duplicate_authorization` (400), `not_ready` (503: no key, no backend) |
| `gateway_open_connections` | gauge | client connections open on the public port |
| `gateway_connections_closed_total{reason}` | counter | connections the gateway closed: `head_too_large` |
|  |  | (431), `head_timeout` (408 or silent), `body_timeout` (408 or closed), `evicted` |
|  |  | (idle or reading a body, at `max_connections`), `over_capacity` (503: all busy) |
| `gateway_upstream_retries_total` | counter | requests sent again (once): the backend did not read them |
| `gateway_upstream_errors_total` | counter | backend failures answered 502 or streams the backend broke |
| `gateway_routes_total` | counter | upstream changes through the control channel |
| `gateway_drains_total` | counter | drains run |
| `gateway_hold_active` | gauge | 1 while a control hold is set |
| `gateway_backend_ready` | gauge | 1 while the backend answers `/health` (and lists the served name) |
| `gateway_backend_info{upstream}` | gauge | 1 for the upstream served now |
| `gateway_sleeps_total{result}` | counter | `/sleep` calls through the control channel (`ok`, `failed`) |
| `gateway_wakes_total{result}` | counter | `/wake_up` calls through the control channel (`ok`, `failed`) |
| `gateway_waking` | gauge | 1 while a `/wake_up` runs (status shows the backend as `waking`) |
| `gateway_switch_demands_total{reason}` | counter | switch demands raised: `alias` (a request named |
|  |  | an alias) or `auto` (the automatic policy) |
| `gateway_switches_total{reason,outcome}` | counter | demands the host answered: `ok` or `failed` |
| `gateway_switch_withdrawn_total` | counter | automatic demands dropped before the host took them |
| `gateway_serving_variant_info{variant}` | gauge | 1 for the variant the host reported serving |
| `gateway_live_requests_total{upstream}` | counter | requests forwarded to each live upstream |
| `gateway_live_outstanding{upstream}` | gauge | requests in flight on each live upstream |
| `gateway_live_errors_total{upstream}` | counter | refused or broken connections and 502s, per upstream |
| `gateway_live_ready{upstream}` | gauge | 1 while a live upstream passes its health check |
| `gateway_route_decisions_total{reason}` | counter | live routing decisions: `alias`, `class`, `crossover`, |
|  |  | `fallback`, `balance` (see `routing`) |
| `gateway_continued_streams_total` | counter | streams whose backend broke, continued on another upstream |
| `gateway_continuation_refused_total{reason}` | counter | streams that will not be continued, by reason |
|  |  | (`continuation.REFUSAL_REASONS`) |
| `gateway_continuation_failed_total` | counter | broken streams no continuation could be opened for |
| `gateway_continuation_pause_seconds` | histogram | the pause each continued stream saw (last byte |
|  |  | before the break to the first byte after) |

The `upstream` label is a live upstream's name (`mtp/2`): they come only from the gateway's
settings and the control channel (at most 64), and an upstream's series go when it leaves.

`gateway_refused_requests_total` also counts `residency` (429: another variant's
`min_residency` runs) and `switch_failed` (503: the switch a request waited for failed).
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .routing import REASONS as ROUTE_REASONS

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
)
CONNECTION_CLOSE_REASONS = ("head_too_large", "head_timeout", "body_timeout", "evicted", "over_capacity")
SWITCH_REASONS = ("alias", "auto")
SLEEP_RESULTS = ("ok", "failed")
PAUSE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120, float("inf"))
HOLD_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, float("inf"))
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    """Every gateway metric, bound to one registry so several gateways can live in one process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.held = Gauge("gateway_held_requests", "Requests waiting now", registry=r)
        self.hold_seconds = Histogram(
            "gateway_hold_seconds", "Seconds each held request waited", buckets=HOLD_BUCKETS, registry=r
        )
        self.inflight = Gauge("gateway_inflight_requests", "Requests forwarded and not finished", registry=r)
        self.forwarded = Counter("gateway_requests", "Requests forwarded to the backend", registry=r)
        self.drained = Counter(
            "gateway_drained_requests", "In-flight requests finished during a drain", registry=r
        )
        self.cut = Counter("gateway_cut_requests", "In-flight requests cut by a drain timeout", registry=r)
        self.stalled = Counter(
            "gateway_stalled_streams",
            "Streams ended after stall_timeout without bytes from the backend",
            registry=r,
        )
        self.refused = Counter(
            "gateway_refused_requests", "Requests refused by the gateway", ["reason"], registry=r
        )
        for reason in REFUSAL_REASONS:
            self.refused.labels(reason)
        self.retries = Counter(
            "gateway_upstream_retries", "Requests sent again: the backend did not read them", registry=r
        )
        self.upstream_errors = Counter(
            "gateway_upstream_errors", "Backend failures seen by clients", registry=r
        )
        self.connections = Gauge("gateway_open_connections", "Client connections open", registry=r)
        self.connections_closed = Counter(
            "gateway_connections_closed", "Client connections the gateway closed", ["reason"], registry=r
        )
        for reason in CONNECTION_CLOSE_REASONS:
            self.connections_closed.labels(reason)
        self.routes = Counter("gateway_routes", "Upstream changes through the control channel", registry=r)
        self.drains = Counter("gateway_drains", "Drains run", registry=r)
        self.hold_active = Gauge("gateway_hold_active", "1 while a control hold is set", registry=r)
        self.backend_ready = Gauge("gateway_backend_ready", "1 while the backend is ready", registry=r)
        self.backend_info = Gauge(
            "gateway_backend_info", "1 for the upstream served now", ["upstream"], registry=r
        )

        self.sleeps = Counter("gateway_sleeps", "Backend /sleep calls", ["result"], registry=r)
        self.wakes = Counter("gateway_wakes", "Backend /wake_up calls", ["result"], registry=r)
        for result in SLEEP_RESULTS:
            self.sleeps.labels(result)
            self.wakes.labels(result)
        self.waking = Gauge("gateway_waking", "1 while a /wake_up runs", registry=r)

        self.switch_demands = Counter(
            "gateway_switch_demands", "Switch demands raised", ["reason"], registry=r
        )
        self.switches = Counter(
            "gateway_switches", "Switch demands answered by the host", ["reason", "outcome"], registry=r
        )
        for reason in SWITCH_REASONS:
            self.switch_demands.labels(reason)
            for outcome in ("ok", "failed"):
                self.switches.labels(reason, outcome)
        self.switch_withdrawn = Counter(
            "gateway_switch_withdrawn", "Automatic demands dropped before the host took them", registry=r
        )
        self.serving_info = Gauge(
            "gateway_serving_variant_info", "1 for the variant reported serving", ["variant"], registry=r
        )

        self.live_requests = Counter(
            "gateway_live_requests", "Requests forwarded to each live upstream", ["upstream"], registry=r
        )
        self.live_outstanding = Gauge(
            "gateway_live_outstanding", "Requests in flight on each live upstream", ["upstream"], registry=r
        )
        self.live_errors = Counter(
            "gateway_live_errors", "Failed requests per live upstream", ["upstream"], registry=r
        )
        self.live_ready = Gauge(
            "gateway_live_ready", "1 while a live upstream passes its health check", ["upstream"], registry=r
        )
        self.route_decisions = Counter(
            "gateway_route_decisions", "Live routing decisions by reason", ["reason"], registry=r
        )
        for reason in ROUTE_REASONS:
            self.route_decisions.labels(reason)

        self.continued = Counter(
            "gateway_continued_streams", "Broken streams continued on another upstream", registry=r
        )
        self.continuation_refused = Counter(
            "gateway_continuation_refused", "Streams that will not be continued", ["reason"], registry=r
        )
        for reason in CONTINUATION_REFUSALS:
            self.continuation_refused.labels(reason)
        self.continuation_failed = Counter(
            "gateway_continuation_failed", "Broken streams that could not be continued", registry=r
        )
        self.continuation_pause = Histogram(
            "gateway_continuation_pause_seconds",
            "The pause each continued stream saw",
            buckets=PAUSE_BUCKETS,
            registry=r,
        )

    def live_added(self, name: str) -> None:
        """Create a live upstream's series (zero)."""
        self.live_requests.labels(name)
        self.live_outstanding.labels(name)
        self.live_errors.labels(name)
        self.live_ready.labels(name)

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

    def set_serving(self, old: str | None, new: str) -> None:
        """Point `gateway_serving_variant_info` at the variant that serves now."""
        if old is not None and old != new:
            with contextlib.suppress(KeyError):
                self.serving_info.remove(old)
        self.serving_info.labels(new).set(1)

    def set_upstream(self, old: str | None, new: str) -> None:
        """Point `gateway_backend_info` at the new upstream."""
        if old is not None and old != new:
            self.backend_info.remove(old)
        self.backend_info.labels(new).set(1)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
