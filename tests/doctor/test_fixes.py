"""Fixes name commands the user has: `make` targets only when running from the checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer.doctor.engine_checks import check_compose, check_engine, engine_finding
from composer.engine import client, fixes
from composer.engine.diagnose import hints
from composer.errors import DockerUnavailable


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the tool ran from a wheel: no Makefile beside the package."""
    monkeypatch.setattr(fixes, "in_checkout", lambda: False)


def _unreachable():
    raise DockerUnavailable("cannot reach the Docker engine")


def _no_compose() -> str:
    raise DockerUnavailable("the Compose v2 plugin is missing")


def test_this_checkout_is_recognised() -> None:
    assert fixes.in_checkout()
    assert check_engine(_unreachable)[0].fix == "start dockerd (make docker)"


def test_an_installed_tool_names_no_make_target(installed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client.shutil, "which", lambda name: None)
    with pytest.raises(DockerUnavailable) as missing:
        client.docker_binary()
    found = [
        check_engine(_unreachable)[0].fix,
        check_compose(_no_compose).fix,
        engine_finding("18.09.1").fix,
        fixes.build_image("vllm-composer-gateway:0.1.0"),
        str(missing.value),
        *hints(
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n"
            "  Input should be 'ngram' or 'mtp' [type=literal_error"
        ),
    ]
    assert all(f and "make " not in f for f in found), found
    assert "systemctl start docker" in found[0] and "docker-compose-plugin" in found[1]
    assert "docker load" in found[3]
    assert (
        fixes.build_overlay("dflash2", Path(".env.demo")) == "compose-spec --env-file .env.demo build dflash2"
    )
