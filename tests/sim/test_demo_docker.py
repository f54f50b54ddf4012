"""`make demo ENV_FILE=...` (images/sim/demo.sh): the env file chooses the project and the
port and receives the generated key, the closing lines name the real URL and project once
`status` says mtp serves and give a `curl` and a `status` that work as printed, and the
default project `vllm` and port 8000 are left alone."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port, isolated_env, remove_project

pytestmark = pytest.mark.docker


def _default_project(client) -> list[tuple[str, str]]:
    found = client.containers.list(
        all=True, filters={"label": "com.docker.compose.project=vllm"}, ignore_removed=True
    )
    return sorted((c.id, c.status) for c in found)


def test_demo_honours_the_env_file(tmp_path: Path, project_name: str, docker_client) -> None:
    port = free_port()
    models = REPO / "images" / "sim" / "models"
    env_file = tmp_path / "demo.env"
    lines = [
        line
        for line in (REPO / ".env.demo").read_text(encoding="utf-8").splitlines()
        if not line.startswith(("MODEL_DIR=", "DRAFT_DIR="))
    ]
    lines += [
        f"MODEL_DIR={models / 'Qwen3.8-27B'}",
        f"DRAFT_DIR={models / 'Qwen3.8-27B-DFlash2'}",
        f"COMPOSE_PROJECT_NAME={project_name}",
        f"VLLM_PORT={port}",
    ]
    env_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = isolated_env(tmp_path)
    del env["VLLM_API_KEY"]  # the demo makes its own
    before = _default_project(docker_client)
    compose_spec = str(Path(sys.executable).parent / "compose-spec")
    try:
        done = subprocess.run(
            ["bash", str(REPO / "images" / "sim" / "demo.sh"), compose_spec, str(env_file)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        done_line, try_it, curl, status, stop = done.stdout.strip().splitlines()[-5:]
        assert (
            f"done: mtp serves on http://127.0.0.1:{port} as claude-opus-5 (project {project_name}); "
            f"the API key is in {env_file}" in done_line
        )
        assert try_it == "try it:" and stop.startswith("stop it with: ") and stop.endswith(" down")
        assert f"--env-file {env_file} " in stop and ":8000" not in done.stdout
        (key,) = [line for line in env_file.read_text().splitlines() if line.startswith("VLLM_API_KEY=")]
        assert key.removeprefix("VLLM_API_KEY=") not in done.stdout + done.stderr
        assert env_file.stat().st_mode & 0o077 == 0
        # The printed commands work as printed, from the checkout (where `make demo` runs).
        answer = subprocess.run(
            ["bash", "-c", curl.strip()], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert answer.returncode == 0 and '"choices"' in answer.stdout, answer.stdout + answer.stderr
        shown = subprocess.run(
            ["bash", "-c", status.strip()], cwd=REPO, env=env, capture_output=True, text=True
        )
        # the key reached the gateway: no 401 anywhere (a port such as 64015 holds the digits)
        assert shown.returncode == 0 and "mtp" in shown.stdout, shown.stdout
        assert not re.search(r"\b401\b", shown.stdout), shown.stdout
        running = docker_client.containers.list(
            filters={"label": f"com.docker.compose.project={project_name}"}
        )
        kinds = sorted(
            c.labels.get("vllm-composer.variant") or c.labels["vllm-composer.role"] for c in running
        )
        assert kinds == ["gateway", "gateway-port", "mtp"]
        assert _default_project(docker_client) == before
    finally:
        remove_project(docker_client, project_name)


def test_a_missing_env_file_is_named(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(REPO / "images" / "sim" / "demo.sh"), "compose-spec", str(tmp_path / "nope.env")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "nope.env does not exist" in done.stderr
