"""Why a restarted container stopped: its real exit code, not the 0 Docker shows once it runs again."""

from __future__ import annotations

import time
import uuid

import pytest

from composer.engine.variant_container import VariantContainer

pytestmark = pytest.mark.docker

BASE_IMAGE = "vllm-composer-base:bookworm"


def test_a_restarted_container_reports_the_code_it_exited_with(docker_client) -> None:
    container = docker_client.containers.run(
        BASE_IMAGE,
        ["sh", "-c", "sleep 1; exit 3"],
        detach=True,
        restart_policy={"Name": "on-failure"},
        name=f"vct-exitcode-{uuid.uuid4().hex[:8]}",
        network_mode="none",
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # wait until the restart runs it again: Docker's State.ExitCode reads 0 then
            container.reload()
            if container.attrs["RestartCount"] > 0 and container.attrs["State"]["Status"] == "running":
                break
            assert time.monotonic() < deadline, container.attrs["State"]
            time.sleep(0.05)
        assert container.attrs["State"]["ExitCode"] == 0
        assert (
            VariantContainer(container).exit_reason() == "the container exited with code 3 and was restarted"
        )
    finally:
        container.remove(force=True)
