"""A corrupt run file of the serving variant: `up` refuses before anything stops, naming the file,
and the serving variant keeps serving (before, the failed swap's rollback failed on it with
nothing serving)."""

from __future__ import annotations

import pytest

from tests.swap.conftest import running_containers
from tests.swap.test_swap import assert_serving

pytestmark = pytest.mark.docker


def test_a_corrupt_rollback_source_is_refused_before_anything_stops(sim_stack, docker_client) -> None:
    assert sim_stack.run("up", "baseline").returncode == 0
    (container,) = running_containers(docker_client, sim_stack.project)
    run_file = container.labels["com.docker.compose.project.config_files"].split(",")[0]
    with open(run_file, "w", encoding="utf-8") as handle:
        handle.write("services:\n  vllm: [\n")
    done = sim_stack.run("up", "mtp-crash")
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert run_file in last and "is not valid YAML" in last and "would be started from on a rollback" in last
    assert_serving(sim_stack, docker_client, "baseline")
    assert container.id == running_containers(docker_client, sim_stack.project)[0].id, "never stopped"
