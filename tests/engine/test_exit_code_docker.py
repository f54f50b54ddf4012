"""Why a restarted container stopped: its real exit code, not the 0 Docker shows once it runs again."""

from __future__ import annotations

import time

import pytest

from composer.engine.variant_container import VariantContainer

pytestmark = pytest.mark.docker


def test_a_restarted_container_reports_the_code_it_exited_with(run_script) -> None:
    container = run_script("sleep 1; exit 3", "on-failure")
    deadline = time.monotonic() + 30
    while True:  # wait until the restart runs it again: Docker's State.ExitCode reads 0 then
        container.reload()
        if container.attrs["RestartCount"] > 0 and container.attrs["State"]["Status"] == "running":
            break
        assert time.monotonic() < deadline, container.attrs["State"]
        time.sleep(0.05)
    assert container.attrs["State"]["ExitCode"] == 0
    assert VariantContainer(container).exit_reason() == "the container exited with code 3 and was restarted"
