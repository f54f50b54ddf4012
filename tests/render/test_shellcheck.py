"""shellcheck reports nothing on the committed launchers or on renders of awkward values."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from composer.render.files import render_all
from composer.stack.model import Stack
from tests.conftest import shipped_variants

from .conftest import REPO
from .odd import odd_stack


@pytest.fixture(autouse=True)
def shellcheck_installed() -> None:
    """Skip without shellcheck, except under CI=true where it must run (`make tools`)."""
    if shutil.which("shellcheck") is None:
        message = "shellcheck is not installed: run `make tools`"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(message + " (CI=true: these tests must not skip)")
        pytest.skip(message)


def _shellcheck(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["shellcheck", "--shell=bash", *map(str, paths)], capture_output=True, text=True, timeout=120
    )


def test_committed_launchers_are_clean() -> None:
    launchers = sorted((REPO / "compose").glob("*.sh"))
    assert len(launchers) == len(shipped_variants())
    result = _shellcheck(launchers)
    assert result.returncode == 0 and result.stdout == "", result.stdout


@pytest.mark.parametrize("multiline", [False, True])
def test_odd_value_launchers_are_clean(default_stack: Stack, tmp_path: Path, multiline: bool) -> None:
    files = [
        f for f in render_all(odd_stack(default_stack, multiline), [], tmp_path) if f.path.suffix == ".sh"
    ]
    for file in files:
        file.path.write_text(file.content)
    control = odd_stack(default_stack, multiline)
    control = type(control)(**{**control.__dict__, "served_model_name": "ctl \x01\x7f\x1b end"})
    extra = render_all(control, ["baseline"], tmp_path / "ctl")
    for file in extra:
        file.path.parent.mkdir(exist_ok=True)
        file.path.write_text(file.content)
    result = _shellcheck([f.path for f in files] + [f.path for f in extra if f.path.suffix == ".sh"])
    assert result.returncode == 0 and result.stdout == "", result.stdout


def test_image_build_scripts_are_clean() -> None:
    """The image scripts and the library they source (followed with -x)."""
    scripts = [*sorted((REPO / "images").glob("*/*.sh")), REPO / "images/build-lib.sh"]
    result = subprocess.run(
        ["shellcheck", "-x", *map(str, scripts)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stdout == "", result.stdout
