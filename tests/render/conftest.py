"""Fixtures for the foundation tests: isolation from the developer's environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from composer.stack.load import load_stack
from composer.stack.model import Stack

from .helpers import ENV_VARS_READ, install_stub_docker

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from the repository root with no stack variable in the environment."""
    monkeypatch.chdir(REPO)
    for name in list(os.environ):
        if name in ENV_VARS_READ or name.endswith("_IMAGE"):
            monkeypatch.delenv(name)


@pytest.fixture
def empty_env_file(tmp_path: Path) -> Path:
    """An existing, empty env file."""
    path = tmp_path / "empty.env"
    path.write_text("")
    return path


@pytest.fixture(scope="session")
def stub_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the stub `docker`, to put first on PATH."""
    return install_stub_docker(tmp_path_factory.mktemp("stub-docker"))


@pytest.fixture
def default_stack(empty_env_file: Path) -> Stack:
    """composer.toml with no .env, environment or flags."""
    return load_stack(None, empty_env_file, environ={})
