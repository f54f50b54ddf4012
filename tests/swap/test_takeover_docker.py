"""Two stacks in one compose project on the real daemon: the second `up` is refused (and
`--dry-run` says so) until `--takeover`, and so are its `down`, `down --volumes` and `down
VARIANT`; its `status` names the owner and exits 1 (another key); `ps` lists the gateway and
its port holder with the published port; `down` keeps the gateway's state volume and says so, `down --volumes` removes it."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.swap.conftest import running_containers

pytestmark = pytest.mark.docker


def test_another_stack_in_the_project_is_refused_until_takeover(sim_stack, tmp_path, docker_client):
    assert sim_stack.run("up", "baseline").returncode == 0
    folder = tmp_path / "other"
    folder.mkdir()
    shutil.copy(REPO / "composer.toml", folder / "composer.toml")
    env = {**sim_stack.env, "VLLM_API_KEY": secrets.token_urlsafe(24)}  # another key too

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        """compose-spec for the other stack: its own first file, then the test stack's."""
        argv = [sys.executable, "-m", "composer", "--env-file", str(REPO / ".env.demo")]
        argv += ["--stack", str(folder / "composer.toml"), "--stack", str(sim_stack.stack_file), *extra]
        return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)

    planned = run("up", "mtp", "--dry-run")
    expected = (
        f"was started by another stack, {(REPO / 'composer.toml').resolve()} "
        f"(project {sim_stack.project}), with another API key"
    )
    assert (
        planned.returncode == 2  # what `up` would do: refuse (a usage error)
        and planned.stdout.startswith("refused: baseline (")
        and expected in planned.stdout
    )
    refused = run("up", "mtp")
    assert refused.returncode == 2 and expected in refused.stderr and "--takeover" in refused.stderr
    for command in (("down",), ("down", "--volumes"), ("down", "baseline")):  # one project, one owner
        stopped = run(*command)
        said = f"`{' '.join(command)}` here would stop what that stack serves"
        assert stopped.returncode == 2 and expected in stopped.stderr and said in stopped.stderr, (
            stopped.stderr
        )
        assert "--takeover" in stopped.stderr and len(stopped.stderr.strip().splitlines()) == 1
    planned_down = run("down", "--dry-run")
    assert planned_down.returncode == 2 and planned_down.stdout.startswith("refused: baseline (")
    theirs = run("status", "--json")  # the owner named; another key: exit 1, and no `up` advised
    shown = json.loads(theirs.stdout)
    assert theirs.returncode == 1 and shown["owner"]["stack_file"] == str((REPO / "composer.toml").resolve())
    assert shown["owner"]["key_mismatch"] is True and shown["health"] == "unauthorized"
    assert not any("compose-spec up" in w for w in shown["warnings"]), shown["warnings"]
    volume = {"label": f"com.docker.compose.project={sim_stack.project}"}
    assert docker_client.volumes.list(filters=volume) != []
    assert [
        c.labels["vllm-composer.variant"] for c in running_containers(docker_client, sim_stack.project)
    ] == ["baseline"]
    table = sim_stack.run("ps").stdout.splitlines()
    assert table[0].split() == ["NAME", "VARIANT/ROLE", "STATE", "PORTS"]
    holder = next(line for line in table if " gateway-port " in line)  # it publishes the gateway's port
    assert any(" gateway " in line and "running" in line for line in table)
    assert f"127.0.0.1:{sim_stack.port}->" in holder and any(
        " baseline " in line and "serving" in line for line in table
    )

    taken = run("up", "mtp", "--takeover")
    assert taken.returncode == 0, taken.stderr
    assert "takes over: baseline" in taken.stderr
    labels = running_containers(docker_client, sim_stack.project)[0].labels
    assert labels["vllm-composer.variant"] == "mtp"
    assert labels["vllm-composer.stack-file"] == str((folder / "composer.toml").resolve())
    assert env["VLLM_API_KEY"] not in str(labels)
    assert sim_stack.run("up", "baseline").returncode == 2  # now the first stack is the other one

    down = run("down")
    assert (
        down.returncode == 0 and f"kept the project's volume {sim_stack.project}_gateway-state" in down.stderr
    )
    assert [v.name for v in docker_client.volumes.list(filters=volume)] == [
        f"{sim_stack.project}_gateway-state"
    ]
    assert run("down", "--volumes").returncode == 0
    assert docker_client.volumes.list(filters=volume) == []
