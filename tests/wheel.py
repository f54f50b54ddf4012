"""Build the project's wheel from a private copy of its sources.

pip builds a local project in its own folder: setuptools writes `build/` and the egg-info
there, so two builds of the checkout at once (two test workers, or a test beside a
developer's own build) trip over each other's files. A copy of what the wheel is made of
keeps each build to itself and leaves the checkout untouched.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

# What pyproject.toml packages: the package, the folders mapped into it, the starter stack.
SOURCES = ("pyproject.toml", "README.md", "composer.toml", ".env.example", "composer", "templates", "schema")


def build_wheel(work: Path) -> Path:
    """Build the wheel in `work` (a fresh folder) and return its path; fail with pip's output."""
    source = work / "source"
    source.mkdir(parents=True)
    for name in SOURCES:
        origin = REPO / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, source / name)
    dist = work / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(source)]
    done = subprocess.run(build, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (wheel,) = dist.glob("vllm_variant_composer-*.whl")
    return wheel
