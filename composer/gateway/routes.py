"""Which paths the gateway guards with the API key and which it never forwards.

The key guards the same path prefixes vLLM guards (`/v1`, `/v2`, `/inference`). vLLM's
dev-mode and admin routes (sleep, wake-up, weight reloads, cache resets, profiler, runtime
LoRA loading, ...) are never reachable through the public port: the control channel reaches
them instead.
"""

from __future__ import annotations

import hashlib
import hmac
import re

GUARDED_PREFIXES = ("/v1", "/v2", "/inference")
# Paths the gateway answers itself on the public port (everything else goes to the backend).
# /gateway/status needs the API key; /gateway/ui is a static page that reads it with the key.
PUBLIC_PATHS = ("/gateway/metrics", "/gateway/health", "/gateway/status", "/gateway/ui")

DEV_ROUTES = frozenset(
    {
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
        "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter",
    }
)

_SLASHES = re.compile(r"/{2,}")


def normalise(path: str) -> str:
    """Collapse repeated slashes and drop a trailing one, so `//sleep/` compares as `/sleep`."""
    path = _SLASHES.sub("/", path)
    if len(path) > 1:
        path = path.rstrip("/")
    return path or "/"


def is_dev_route(path: str) -> bool:
    """True for a backend dev/admin route (or anything below one)."""
    norm = normalise(path)
    if norm in DEV_ROUTES:
        return True
    return any(norm.startswith(route + "/") for route in DEV_ROUTES)


def is_guarded(path: str) -> bool:
    """True when vLLM would check the API key on this path."""
    return normalise(path).startswith(GUARDED_PREFIXES)


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
