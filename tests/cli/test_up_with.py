"""`up --with prometheus`: one known profile, a VARIANT to start it beside, the compose target only."""

from __future__ import annotations

from pathlib import Path

from .conftest import invoke

STRONG = "Zq3v8TnW1xK5pLr9Yb2mHc7dJf4gS6uE"


def test_an_unknown_profile_is_a_usage_error_naming_the_known_one(
    empty_env_file: Path, no_docker: None
) -> None:
    result = invoke("--env-file", str(empty_env_file), "up", "mtp", "--with", "grafana")
    assert result.exit_code == 2
    assert "'grafana' is not one of 'prometheus', 'follow'" in result.stderr


def test_with_needs_a_variant(empty_env_file: Path, no_docker: None) -> None:
    result = invoke("--env-file", str(empty_env_file), "up", "--recreate-gateway", "--with", "prometheus")
    assert result.exit_code == 2
    assert "--with starts its service once a VARIANT serves" in result.stderr


def test_with_is_refused_on_kubernetes(empty_env_file: Path, no_docker: None) -> None:
    result = invoke(
        "--env-file",
        str(empty_env_file),
        "up",
        "mtp",
        "--target",
        "kubernetes",
        "--with",
        "prometheus",
        env={"VLLM_API_KEY": STRONG},
    )
    assert result.exit_code == 2, result.output
    assert "ServiceMonitor" in result.stderr and "Traceback" not in result.output
