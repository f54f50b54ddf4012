"""A swap checks, before anything stops, the run file its rollback would start the serving
variant from: a corrupt one is refused up front instead of failing mid-rollback with nothing
serving."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer.render.files import run_file
from composer.render.target import resolve_target
from composer.stack.load import load_stack
from composer.swap.plan import Rollback, rollback_source_problem
from tests.conftest import REPO


@pytest.fixture
def serving_file(tmp_path: Path) -> Path:
    """The run file `up baseline` wrote (the serving variant's)."""
    empty = tmp_path / "empty.env"
    empty.write_text("")
    stack = load_stack([REPO / "composer.toml"], empty, environ={})
    return run_file(resolve_target(stack, "baseline"), directory=tmp_path / "state")


def _rollback(path: Path | str, service: str = "vllm") -> Rollback:
    return Rollback("baseline", "start", "vllm-vllm-1", str(path), service)


def test_an_intact_run_file_passes(serving_file: Path) -> None:
    assert rollback_source_problem(_rollback(serving_file)) is None


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"services:\n  vllm: [\n", "is not valid YAML (line 3)"),
        (b"\x00\xff\xfe garbage", "is not valid YAML"),
        (b"", "has no service 'vllm' with an image"),
        (b"services:\n  other:\n    image: x\n", "has no service 'vllm' with an image"),
        (b"services:\n  vllm:\n    command: [serve]\n", "has no service 'vllm' with an image"),
    ],
)
def test_a_corrupt_run_file_is_refused_naming_it(serving_file: Path, content: bytes, expected: str) -> None:
    serving_file.write_bytes(content)
    problem = rollback_source_problem(_rollback(serving_file))
    assert problem is not None and str(serving_file) in problem and expected in problem
    assert "baseline (serving now) would be started from on a rollback" in problem


def test_an_unreadable_or_endless_run_file_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "mtp-abc.yml"
    folder.mkdir()  # a folder where the file should be: it cannot be read
    problem = rollback_source_problem(_rollback(folder))
    assert problem == (
        f"cannot read the run file {folder} that baseline (serving now) would be started from "
        "on a rollback: Is a directory"
    )
    problem = rollback_source_problem(_rollback("/dev/zero"))
    assert problem is not None and "larger than 4 MiB" in problem


def test_nothing_to_check_without_a_file_to_start_from(tmp_path: Path) -> None:
    assert rollback_source_problem(None) is None
    assert rollback_source_problem(Rollback("baseline", "wake", "vllm-vllm-baseline-1")) is None
    assert rollback_source_problem(Rollback("baseline", "start", "vllm-vllm-1")) is None
    # gone: the rollback renders it again from the stack (composer.swap.transaction)
    assert rollback_source_problem(_rollback(tmp_path / "gone.yml")) is None
