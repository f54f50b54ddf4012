"""The canonical path (RFC 3986 dot segments, unreserved decoding, slashes) and the allow-list."""

from __future__ import annotations

import pytest

from composer.gateway.public.paths import BadPath, canonical_path
from composer.gateway.public.routes import is_forwarded, is_own, needs_key

from .attacks import PATH_MATRIX


@pytest.mark.parametrize(
    "raw",
    [
        b"/a/b/c/./../../g",
        b"/./sleep",
        b"/x/../sleep",
        b"/a/..",
        b"/a/.",
        b"//v1//models",
        b"/x/%2E%2e/sl%65ep",
    ],
)
def test_dot_segments_repeated_slashes_and_unreserved_encodings_are_refused(raw: bytes) -> None:
    with pytest.raises(BadPath):
        canonical_path(raw)


@pytest.mark.parametrize(
    "raw", [b"/v1/models", b"/v1/chat/completions", b"/health", b"/v1/a%20b", b"/v1/models/", b"/v1/..x/.y"]
)
def test_canonical_paths_pass_unchanged(raw: bytes) -> None:
    assert canonical_path(raw) == raw.decode()


@pytest.mark.parametrize(
    "raw", [target for _, target in PATH_MATRIX if not target.isascii() or b"/.." in target]
)
def test_ambiguous_paths_are_refused(raw: bytes) -> None:
    with pytest.raises(BadPath):
        canonical_path(raw)


@pytest.mark.parametrize("raw", [b"", b"*", b"v1/models", b"/%2", b"/%g1", b"/a%00", b"/a b", b"/a\xff"])
def test_malformed_paths_are_refused(raw: bytes) -> None:
    with pytest.raises(BadPath):
        canonical_path(raw)


@pytest.mark.parametrize(
    ("path", "forwarded", "keyed"),
    [
        ("/v1/chat/completions", True, True),
        ("/v1/models", True, True),
        ("/v2/rerank", True, True),
        ("/inference/v1/generate", True, True),
        ("/health", True, False),
        ("/health/", True, False),
        ("/metrics", True, False),
        ("/version", True, False),
        ("/ping", True, False),
        ("/load", True, False),
        ("/tokenize", True, True),
        ("/invocations", True, True),
        ("/v1", False, True),
        ("/sleep", False, True),
        ("/wake_up", False, True),
        ("/collective_rpc", False, True),
        ("/is_sleeping", False, True),
        ("/v1/load_lora_adapter", False, True),
        ("/v1/unload_lora_adapter/", False, True),
        ("/v1/load_lora_adapter/x", False, True),
        ("/V1/models", False, True),
        ("/docs", False, True),
    ],
)
def test_allow_list(path: str, forwarded: bool, keyed: bool) -> None:
    assert is_forwarded(path) is forwarded
    assert needs_key(path) is keyed


def test_own_paths() -> None:
    assert is_own("/gateway/health") and is_own("/gateway/anything") and is_own("/gateway")
    assert not is_own("/gatewayx") and not is_own("/health")
