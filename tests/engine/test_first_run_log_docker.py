"""A failure the restart policy restarted: its log as a failed swap shows it, each boot once,
from the first run (real daemon)."""

from __future__ import annotations

import uuid

import pytest

from composer.engine import retry
from composer.engine.retry import Pending
from composer.engine.variant_container import VariantContainer

pytestmark = pytest.mark.docker

BASE_IMAGE = "vllm-composer-base:bookworm"


def test_the_first_run_log_holds_one_boot_of_a_restarted_container(docker_client) -> None:
    container = docker_client.containers.run(
        BASE_IMAGE,
        ["sh", "-c", "echo 'boot: loading'; echo 'RuntimeError: engine failed'; exit 1"],
        detach=True,
        restart_policy={"Name": "always"},
        name=f"vct-firstrun-{uuid.uuid4().hex[:8]}",
        network_mode="none",
    )
    try:

        def restarted_twice() -> None:
            container.reload()
            if container.attrs["RestartCount"] < 2:
                raise Pending("not restarted twice yet")

        retry.within(60.0, 0.1)(restarted_twice)
        variant = VariantContainer(container)
        assert variant.log().count("boot: loading") >= 2  # every run's boot, one after another
        first = variant.first_run_log()
        assert first.count("boot: loading") == 1 and "RuntimeError: engine failed" in first
        assert variant.first_run_log(tail=1).strip() == "RuntimeError: engine failed"
    finally:
        container.remove(force=True)


def test_a_container_that_never_restarted_gives_its_whole_log(docker_client) -> None:
    container = docker_client.containers.run(
        BASE_IMAGE,
        ["sh", "-c", "echo one; echo two"],
        detach=True,
        name=f"vct-firstrun-{uuid.uuid4().hex[:8]}",
        network_mode="none",
    )
    try:
        container.wait(timeout=30)
        assert VariantContainer(container).first_run_log() == "one\ntwo\n"
    finally:
        container.remove(force=True)
