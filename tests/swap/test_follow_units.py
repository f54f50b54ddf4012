"""`compose-spec follow` without Docker: its refusal when nothing switches, and its event lines."""

from __future__ import annotations

from click.testing import CliRunner

from composer.cli import main
from composer.swap.follow import FollowEvent
from tests.conftest import REPO


def test_follow_refuses_a_stack_that_never_switches(tmp_path) -> None:
    env_file = tmp_path / "test.env"
    env_file.write_text("VLLM_API_KEY=sk-follow-test-key-0123456789abcdef\n")
    args = ["--env-file", str(env_file), "--stack", str(REPO / "composer.toml"), "follow"]
    result = CliRunner().invoke(main, args, env={}, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        "compose-spec: error: follow has nothing to run: set gateway.switch_on_model = true "
        "or gateway.policy = 'auto'"
    ]


def test_follow_events_are_one_line_each_with_their_reason() -> None:
    event = FollowEvent("switched", "mtp", "woke from baseline", 3.14159, {"timings": {"wake": 1.0}})
    assert event.line() == "switched mtp (3.1s): woke from baseline"
    assert FollowEvent("gateway", None, "not running").line() == "gateway -: not running"
    assert event.to_json()["details"] == {"timings": {"wake": 1.0}}
