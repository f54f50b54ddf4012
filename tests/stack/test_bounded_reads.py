"""Every file the command line reads has a size limit: an endless or huge env or stack file is
refused at once (one line, exit 2) after one small read, never read whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from composer.stack.bounded import STACK_FILE_LIMIT, FileTooLarge, read_bounded
from tests.conftest import REPO

MEMORY_CAP_KIB = 200 * 1024


# Measured from a small parent: a child's peak RSS counts what it shared with the process
# that forked it, and pytest after a full run is hundreds of MiB.
MEASURE = (
    "import resource, subprocess, sys\n"
    "done = subprocess.run([sys.executable, '-m', 'composer', *sys.argv[1:]], stdout=subprocess.DEVNULL)\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print(done.returncode, peak)\n"
)


def _run(*args: str) -> tuple[int, str, int]:
    """Exit code, stderr and peak memory (KiB) of one compose-spec run, measured alone."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    try:  # a hang (reading without end) fails, not blocks, the run
        done = subprocess.run(
            [sys.executable, "-c", MEASURE, *args], capture_output=True, text=True, env=env, timeout=120
        )
    except subprocess.TimeoutExpired as err:
        raise AssertionError(f"compose-spec {' '.join(args)} did not end") from err
    code, peak = done.stdout.split()
    return int(code), done.stderr, int(peak)


def test_env_file_dev_zero_is_refused_after_one_small_read() -> None:
    code, stderr, peak_kib = _run("--env-file", "/dev/zero", "status")
    assert code == 2, stderr
    assert stderr.splitlines() == [
        "compose-spec: error: env file '/dev/zero' is larger than 4 MiB (without end): "
        "give a file of at most 4 MiB"
    ]
    assert peak_kib < MEMORY_CAP_KIB


def test_a_200_mb_stack_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    huge = tmp_path / "huge.toml"
    with huge.open("wb") as handle:
        handle.truncate(200 * 1000 * 1000)  # sparse: no disk used
    code, stderr, peak_kib = _run("--stack", str(huge), "status")
    assert code == 2, stderr
    (line,) = stderr.splitlines()
    assert f"stack file '{huge}' is larger than 4 MiB (200000000 bytes)" in line
    assert peak_kib < MEMORY_CAP_KIB


def test_read_bounded_takes_the_limit_itself_and_refuses_one_byte_more(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert read_bounded(path, "env file", 10) == b"x" * 10
    with pytest.raises(FileTooLarge, match="larger than 9 bytes"):
        read_bounded(path, "env file", 9)
    assert read_bounded(path, "history", 4, tail=True) == b"xxxx"
    with pytest.raises(FileTooLarge):
        read_bounded("/dev/zero", "history", 4, tail=True)  # no end to take the tail of


def test_a_pipe_without_a_writer_reads_as_empty_instead_of_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert read_bounded(fifo, "env file", STACK_FILE_LIMIT) == b""


def test_doctor_treats_an_oversized_env_file_as_holding_a_secret(tmp_path: Path) -> None:
    from composer.doctor.host_checks import holds_secret

    big = tmp_path / "big.env"
    with big.open("wb") as handle:
        handle.truncate(STACK_FILE_LIMIT + 1)
    assert holds_secret(big)


def test_bench_inputs_are_bounded_too() -> None:
    from composer.bench.prompts import read_prompt_file
    from composer.bench.recommend import read_bench

    with pytest.raises(FileTooLarge, match="prompt file '/dev/zero' is larger than 4 MiB"):
        read_prompt_file("/dev/zero")
    with pytest.raises(FileTooLarge, match="benchmark results file '/dev/zero' is larger than 64 MiB"):
        read_bench("/dev/zero")
