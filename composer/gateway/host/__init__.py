"""The host side: `GatewayControl`, which `compose-spec` uses to hold, drain, route and release a
gateway through `docker exec`. Standard library only; the server never imports it.

Owns: the client (`client`) and its replies.
May import: `composer.errors`, `composer.gateway.config` and `.wire`.
Public: re-exported by `composer.gateway`.
"""
