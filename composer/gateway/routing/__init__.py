"""Which member serves a request, and when: the routing floor of the gateway.

Owns: admission and holds (`gate`), the member set and each member's readiness (`live`,
  `upstream`, `liveness`), the pure choice of a member (`routing`) and of a variant by the
  automatic policy (`policy`), request-driven switching (`switching`) and the watch on the
  network (`netwatch`).
May import: `composer.gateway.config`, `.wire` and `.status.metrics`; never `.public`,
  `.control` or `.host`. `routing` and `policy` use only the standard library.
Public: its modules, imported by path; nothing is re-exported here.
"""
