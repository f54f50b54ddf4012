"""CLI tests run from the repository root, isolated from the developer's environment and Docker."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from composer.cli import main
from tests.render.conftest import empty_env_file, isolated

REPO = Path(__file__).resolve().parents[2]
__all__ = ["empty_env_file", "invoke", "isolated", "no_docker"]


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Point the Docker client at a socket that does not exist (fails loudly if reached)."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    """Run compose-spec in-process with click's runner."""
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
