"""shellcheck reports nothing on the committed launchers or on renders of awkward values."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from composer.render import render_all
from composer.stack import Stack

from .conftest import REPO
from .odd import odd_stack

needs_shellcheck = pytest.mark.skipif(
    shutil.which("shellcheck") is None, reason="shellcheck is not installed (make tools)"
)


def _shellcheck(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["shellcheck", "--shell=bash", *map(str, paths)], capture_output=True, text=True, timeout=120
    )


@needs_shellcheck
def test_committed_launchers_are_clean() -> None:
    launchers = sorted((REPO / "compose").glob("*.sh"))
    assert len(launchers) == 3
    result = _shellcheck(launchers)
    assert result.returncode == 0 and result.stdout == "", result.stdout


@needs_shellcheck
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
