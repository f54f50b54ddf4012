"""What the gateway shows: `/gateway/status`, the status page and the metrics.

Owns: the status view (`view`: the JSON and the page's data), the page itself (`page`), the
  Prometheus metrics (`metrics`) and per-variant throughput sampled from the backends
  (`throughput`).
May import: `composer.gateway.config`, `.control` (the switch history), `.public.routes`
  (the key check) and `.routing`; never `.host`.
Public: its modules, imported by path; nothing is re-exported here.
"""
