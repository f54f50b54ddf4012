"""A failure the restart policy restarted: its log as a failed swap shows it, each boot once,
from the first run (real daemon)."""

from __future__ import annotations

import pytest

from composer.engine import retry
from composer.engine.retry import Pending
from composer.engine.variant_container import VariantContainer

pytestmark = pytest.mark.docker


def test_the_first_run_log_holds_one_boot_of_a_restarted_container(run_script) -> None:
    container = run_script("echo 'boot: loading'; echo 'RuntimeError: engine failed'; exit 1", "always")

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


def test_a_container_that_never_restarted_gives_its_whole_log(run_script) -> None:
    container = run_script("echo one; echo two")
    container.wait(timeout=30)
    assert VariantContainer(container).first_run_log() == "one\ntwo\n"
