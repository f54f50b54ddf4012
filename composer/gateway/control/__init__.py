"""The control channel: the ASGI app on the UNIX socket inside the gateway's container.

Owns: the control verbs (`app`: state, hold, drain, release, upstreams, settings, serving),
  the switches seen through them (`switchlog`) and what a restarted gateway keeps of them in
  its state folder (`switchstore`). Reached only through `docker exec` (`composer.gateway.ctl`),
  never from the public port.
May import: `composer.gateway.config`, `.wire`, `.public`, `.routing` and `.status`; never `.host`.
Public: its modules, imported by path; nothing is re-exported here.
"""
