"""The simulator's `--disable-access-log-for-endpoints`, as vLLM's (PR 30011, vLLM 0.13+):
the listed paths leave no access line, every other request still does."""

from __future__ import annotations

from pathlib import Path

from composer.engine import retry
from composer.engine.retry import Pending

from .conftest import MODELS
from .simproc import SimProcess


def test_listed_endpoints_leave_no_access_line(tmp_path: Path) -> None:
    server = SimProcess.start(
        [
            str(MODELS / "Qwen3.8-27B"),
            "--served-model-name",
            "qwen",
            "--disable-access-log-for-endpoints",
            "/health,/metrics",
        ],
        env={"SIM_TIME_SCALE": "50"},
        log_dir=tmp_path,
    ).wait_ready()
    try:
        for path in ("/health", "/metrics", "/health?x=1", "/v1/models"):
            assert server.request("GET", path)[0] == 200

        def logged() -> None:  # the last request's line is written: every earlier one was too
            if '"GET /v1/models HTTP/1.1" 200' not in server.output():
                raise Pending("the access line is not written yet")

        retry.within(30.0, 0.1)(logged)
    finally:
        server.stop()
    access = [line for line in server.output().splitlines() if '" 200' in line]
    assert len(access) == 1 and '"GET /v1/models HTTP/1.1" 200' in access[0], access
