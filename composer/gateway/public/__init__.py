"""The public data path: what a client's request meets on the shared port, in order.

Owns: the edge (`limits`: connection, head and body limits in uvicorn's protocol; `http10`;
  `screen` and `paths`: the one canonical path; `routes`: the allow-list and the key check),
  the forwarding app (`proxy`), its upstream client (`pool`), what it reads from bodies
  (`bodies`, `listing`), held streams' keep-alive (`keepalive`), stream continuation
  (`continuation`) and the gateway's own answers (`answers`).
May import: `composer.gateway.config`, `.wire`, `.routing` (which member, the gate) and
  `.status.metrics`; never `.control` or `.host`.
Public: its modules, imported by path; nothing is re-exported here.
"""
