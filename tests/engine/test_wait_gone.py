"""VariantContainer.wait_gone: polls until Docker no longer knows the container."""

from __future__ import annotations

import pytest
from docker.errors import NotFound

from composer.engine.variant_container import VariantContainer
from composer.errors import ComposerError


class _Removing:
    """A container Docker forgets after `lookups` reloads (never when None)."""

    name = "vllm-mtp-1"

    def __init__(self, lookups: int | None, error: Exception | None = None) -> None:
        self.lookups, self.error, self.reloads = lookups, error, 0

    def reload(self) -> None:
        self.reloads += 1
        if self.error is not None:
            raise self.error
        if self.lookups is not None and self.reloads > self.lookups:
            raise NotFound("gone")


def test_returns_once_the_container_is_gone() -> None:
    container = _Removing(lookups=3)
    VariantContainer(container).wait_gone(5)  # type: ignore[arg-type]
    assert container.reloads == 4


def test_names_the_container_still_being_removed_after_the_timeout() -> None:
    container = _Removing(lookups=None)
    with pytest.raises(ComposerError, match=r"vllm-mtp-1 is still being removed after 0 s"):
        VariantContainer(container).wait_gone(0.3)  # type: ignore[arg-type]
    assert container.reloads >= 2


def test_another_docker_error_ends_the_wait_at_once() -> None:
    container = _Removing(lookups=None, error=RuntimeError("daemon went away"))
    with pytest.raises(ComposerError, match="could not stop vllm-mtp-1: daemon went away"):
        VariantContainer(container).wait_gone(5)  # type: ignore[arg-type]
    assert container.reloads == 1
