"""What the public port does with a canonical path: the gateway's own paths, the allow-list of
backend routes it forwards, and which of those need the API key.

Every decision reads the canonical path (`paths.canonical_path`). Only vLLM's public API is
forwarded: `/v1/...` (less the runtime LoRA routes), `/v2/...`, `/inference/...` and
`FORWARDED_ROUTES`; everything else, dev-mode and admin routes included, is answered 404
without reaching the backend (the control channel reaches those). With a key set, every
forwarded route but `OPEN_ROUTES` (health, version, metrics, ping, load) needs it.
"""

from __future__ import annotations

import hashlib
import hmac

# Paths the gateway answers itself on the public port; anything under OWN_PREFIX is never
# forwarded (an unknown one is 404). Add a path here and a route in `runtime`.
OWN_PREFIX = "/gateway/"
# /gateway/status needs the API key; /gateway/ui is a static page that reads it with the key.
PUBLIC_PATHS = ("/gateway/metrics", "/gateway/health", "/gateway/status", "/gateway/ui")

# Backend routes forwarded without the key (status only, no model work).
OPEN_ROUTES = frozenset({"/health", "/version", "/metrics", "/ping", "/load"})
# Single backend routes forwarded (vLLM's public API outside the prefixes below).
FORWARDED_ROUTES = OPEN_ROUTES | {
    "/tokenize",
    "/detokenize",
    "/tokenizer_info",
    "/pooling",
    "/classify",
    "/score",
    "/rerank",
    "/invocations",
}
# Everything below these prefixes is forwarded (the OpenAI-compatible API and its siblings) ...
FORWARDED_PREFIXES = ("/v1/", "/v2/", "/inference/")
# ... but for these dev-mode routes inside them (runtime LoRA loading).
BLOCKED_ROUTES = frozenset({"/v1/load_lora_adapter", "/v1/unload_lora_adapter"})

# vLLM's dev-mode and admin routes: never forwarded (they are not in the allow-list); listed
# for documentation and tests.
DEV_ROUTES = BLOCKED_ROUTES | {
    "/sleep",
    "/wake_up",
    "/is_sleeping",
    "/collective_rpc",
    "/reset_prefix_cache",
    "/reset_mm_cache",
    "/reset_encoder_cache",
    "/server_info",
    "/pause",
    "/resume",
    "/is_paused",
    "/scale_elastic_ep",
    "/is_scaling_elastic_ep",
    "/update_weights",
    "/init_weight_transfer",
    "/init_weight_transfer_engine",
    "/update_weights_from_disk",
    "/start_profile",
    "/stop_profile",
}


def _route(path: str) -> str:
    """The path without one trailing slash (`/health/` names the same route as `/health`)."""
    return path[:-1] if len(path) > 1 and path.endswith("/") else path


def is_own(path: str) -> bool:
    """True for a path the gateway answers itself."""
    return path.startswith(OWN_PREFIX) or path == OWN_PREFIX[:-1]


def is_forwarded(path: str) -> bool:
    """True when the canonical `path` is on the allow-list of backend routes."""
    route = _route(path)
    if route in FORWARDED_ROUTES:
        return True
    if not path.startswith(FORWARDED_PREFIXES):
        return False
    return not any(route == blocked or route.startswith(blocked + "/") for blocked in BLOCKED_ROUTES)


def is_dev_route(path: str) -> bool:
    """True for one of vLLM's dev-mode or admin routes (for counting refusals)."""
    return _route(path) in DEV_ROUTES


def needs_key(path: str) -> bool:
    """True when a forwarded `path` needs the API key (when one is set)."""
    return _route(path) not in OPEN_ROUTES


class KeyCheck:
    """Constant-time check of `Authorization: Bearer <key>`; the key is kept only as a digest."""

    def __init__(self, api_key: str) -> None:
        self.enabled = bool(api_key)
        self._digest = hashlib.sha256(f"Bearer {api_key}".encode()).digest()

    def allows(self, authorization: bytes | None) -> bool:
        """True when the key is not enforced or the header carries it."""
        if not self.enabled:
            return True
        offered = hashlib.sha256(authorization or b"").digest()
        return hmac.compare_digest(offered, self._digest)
