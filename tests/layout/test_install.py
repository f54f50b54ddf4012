"""A non-editable install (a built wheel) works from any folder like the checkout does,
and `compose-spec init` makes a working stack in an empty folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import COMPOSE_SPEC, REPO, shipped_variants
from tests.wheel import build_wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package built as a wheel and installed (not editable) into its own folder."""
    work = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(work)
    site = work / "site"
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site)]
    subprocess.run([*install, str(wheel)], check=True, capture_output=True, timeout=300)
    return site


def _run_installed(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m composer` importing the wheel's copy first (the dependencies come from this env)."""
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-m", "composer", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_the_wheel_is_what_runs(installed: Path, tmp_path: Path) -> None:
    probe = "import composer.render.files as f; print(f.__file__); print(f.templates_dir())"
    env = {**os.environ, "PYTHONPATH": str(installed)}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    module, templates = out.stdout.split()
    assert module.startswith(str(installed)) and templates.startswith(str(installed)), out.stdout


@pytest.mark.slow
def test_installed_render_from_another_folder_matches_the_checkout(installed: Path, tmp_path: Path) -> None:
    empty_env = tmp_path / "empty.env"
    empty_env.write_text("")
    stack = ["--env-file", str(empty_env), "--stack", str(REPO / "composer.toml")]
    wheel_out, checkout_out = tmp_path / "wheel", tmp_path / "checkout"
    done = _run_installed(installed, tmp_path, *stack, "render", "--out", str(wheel_out))
    assert done.returncode == 0, done.stderr
    checkout = subprocess.run(
        [*COMPOSE_SPEC, *stack, "render", "--out", str(checkout_out)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert checkout.returncode == 0, checkout.stderr
    names = sorted(p.name for p in checkout_out.iterdir())
    assert names == sorted(p.name for p in wheel_out.iterdir()) and len(names) == 2 * len(shipped_variants())
    for name in names:
        assert (wheel_out / name).read_bytes() == (checkout_out / name).read_bytes(), name


@pytest.mark.slow
def test_init_then_render_in_an_empty_folder(installed: Path, tmp_path: Path) -> None:
    stack_dir = tmp_path / "my-stack"
    identity = ("--project", "vllm", "--port", "8000")  # the reference stack's, as committed
    done = _run_installed(installed, tmp_path, "init", str(stack_dir), "--env", *identity)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in stack_dir.iterdir()) == [".env", ".env.example", "composer.toml"]
    assert (stack_dir / ".env").stat().st_mode & 0o777 == 0o600
    key_line = (stack_dir / ".env").read_text().strip()
    assert key_line.startswith("VLLM_API_KEY=sk-") and len(key_line) > len("VLLM_API_KEY=sk-") + 40
    assert key_line.split("=", 1)[1] not in done.stdout + done.stderr  # the key is never shown
    schema = (stack_dir / "composer.toml").read_text().splitlines()[0].removeprefix("#:schema file://")
    assert schema.startswith(str(installed)) and Path(schema).is_file()  # the wheel ships the schema
    # Rendered from elsewhere, the files land next to the stack file, like the committed ones.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    args = ["--env-file", str(tmp_path / "none.env"), "--stack", str(stack_dir / "composer.toml"), "render"]
    (tmp_path / "none.env").write_text("")
    rendered = _run_installed(installed, elsewhere, *args)
    assert rendered.returncode == 0, rendered.stderr
    assert not any(elsewhere.iterdir())
    for committed in (REPO / "compose").iterdir():
        assert (stack_dir / "compose" / committed.name).read_bytes() == committed.read_bytes(), committed.name


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    (tmp_path / "composer.toml").write_text("# mine\n")
    done = subprocess.run([*COMPOSE_SPEC, "init", str(tmp_path)], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "exists already: pass --force" in done.stderr
    assert (tmp_path / "composer.toml").read_text() == "# mine\n"
    assert not (tmp_path / ".env.example").exists()
    (tmp_path / ".env").write_text("VLLM_API_KEY=keep\n")
    again = subprocess.run(
        [*COMPOSE_SPEC, "init", str(tmp_path), "--force", "--env"], capture_output=True, text=True, cwd=REPO
    )
    assert again.returncode == 2 and "init never overwrites it" in again.stderr
    assert (tmp_path / ".env").read_text() == "VLLM_API_KEY=keep\n"


def test_python_dash_m_composer(tmp_path: Path) -> None:
    done = subprocess.run([*COMPOSE_SPEC, "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and "version" in done.stdout
