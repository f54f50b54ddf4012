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


def test_recreate_gateway_says_its_line_and_prints_ups_result_as_json(
    empty_env_file: Path, no_docker: None, monkeypatch
) -> None:
    """`up --recreate-gateway` returns `up`'s one result type: its line (what was done, the
    time, the port's gap) and, with --json, the object `up` prints."""
    import json

    from composer.cli.base import Context
    from composer.swap import gateway_port
    from composer.swap.outcome import UpResult

    gap = {"seconds": 0.0, "probes": 97, "failed": 0, "watched": 2.17}
    said = "gateway recreated (p-gateway-1): http://127.0.0.1:8000 answers; mtp serves through it again"
    done = UpResult("mtp", "gateway-recreated", notes=[said], timings={"total": 2.5123}, port_gap=gap)
    monkeypatch.setattr(gateway_port, "recreate_gateway", lambda *a, **k: done)
    monkeypatch.setattr(Context, "docker", lambda self, timeout=None: None)
    args = ("--env-file", str(empty_env_file), "up", "--recreate-gateway")
    line = invoke(*args, env={"VLLM_API_KEY": STRONG})
    assert line.exit_code == 0, line.output
    assert line.stdout.strip() == f"{said} (2.5s); the port answered all 97 probes (watched 2.17 s)"
    data = json.loads(invoke(*args, "--json", env={"VLLM_API_KEY": STRONG}).stdout)
    assert (data["variant"], data["outcome"], data["notes"]) == ("mtp", "gateway-recreated", [said])
    assert data["port_gap"] == gap
    assert data["timings"] == {"total": 2.512}
