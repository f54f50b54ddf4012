"""`up VARIANT --force-recreate`: the variant that serves unchanged is restarted as a swap
(the gateway holds requests; the old container comes back if the new one fails)."""

from __future__ import annotations

from click.testing import CliRunner

from composer.cli import main
from composer.swap.plan import decide
from tests.conftest import REPO
from tests.swap.test_plan_units import _info, _snap
from tests.swap.test_standby_units import _stack

KEY = "sk-" + "f0" * 24


def _plan(force_recreate: bool):
    stack = _stack()
    snap = _snap(stack, [_info("mtp", service="vllm", sleep_mode=False)], route="http://vllm:8000")
    sleeps = {n: v.standby == "sleep" for n, v in stack.variants.items()}
    return decide(
        snap,
        "mtp",
        "h",
        target_sleeps=False,
        sleeps_in_stack=sleeps,
        current_ready=True,
        force_recreate=force_recreate,
    )


def test_a_variant_serving_unchanged_is_left_alone_unless_forced() -> None:
    assert _plan(force_recreate=False).steps == ()
    forced = _plan(force_recreate=True)
    assert forced.steps == ("stop", "release", "start", "gate")
    assert forced.rollback is not None and forced.rollback.variant == "mtp"
    assert any("--force-recreate: mtp is restarted" in note for note in forced.notes)


def _up(*args: str):
    argv = ["--stack", str(REPO / "composer.toml"), "up", *args]
    return CliRunner().invoke(main, argv, env={"VLLM_API_KEY": KEY})


def test_force_recreate_restarts_one_variant_and_is_refused_elsewhere() -> None:
    for args in (("baseline", "mtp"), ("mtp", "--target", "kubernetes"), ("--recreate-gateway",)):
        result = _up(*args, "--force-recreate")
        assert result.exit_code == 2, (args, result.output)
        assert "--force-recreate restarts one variant on Docker" in result.output
