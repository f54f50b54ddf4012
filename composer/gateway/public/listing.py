"""The model list through the gateway: the backend's `/v1/models` plus one entry per alias.

With `switch_on_model`, each alias is its own model entry (a copy of the served name's entry
with the alias as `id`, the served name as `parent` and the variant it names as `variant`),
so clients that offer the models a server lists (Open WebUI, LibreChat, Continue) offer the
aliases too. A body that is not the expected JSON list passes through unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

MODELS_PATH = "/v1/models"


def with_aliases(body: bytes, served_name: str, aliases: Mapping[str, str]) -> bytes:
    """`body` (a `/v1/models` answer) with an entry for each alias; unchanged when unreadable."""
    try:
        listing = json.loads(body)
    except ValueError:
        return body
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        return body
    served: dict[str, Any] = next(
        (m for m in data if isinstance(m, dict) and m.get("id") == served_name),
        {"object": "model", "owned_by": "vllm"},
    )
    listed = {m.get("id") for m in data if isinstance(m, dict)}
    for alias, variant in aliases.items():
        if alias not in listed:
            data.append(
                {
                    **served,
                    "id": alias,
                    "root": served.get("root", served_name),
                    "parent": served_name,
                    "variant": variant,
                }
            )
    return json.dumps(listing).encode()
