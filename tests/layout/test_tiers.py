"""The test tiers: a test that needs the Docker engine without the `docker` marker is a
collection error, so `pytest -m "not docker"` (make check) never needs the daemon."""

from __future__ import annotations

import pytest

from tests.conftest import REPO

pytest_plugins = ["pytester"]

UNMARKED = """
import pytest

@pytest.fixture
def stack(docker_client):
    return docker_client

def test_plain():
    pass

def test_through_a_fixture(stack):
    pass
"""

MARKED = """
import pytest

pytestmark = pytest.mark.docker

def test_marked(docker_client):
    pass
"""


@pytest.fixture
def tier_dir(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest((REPO / "tests" / "conftest.py").read_text(encoding="utf-8"))
    pytester.makeini("[pytest]\nmarkers =\n    docker: Docker\n    vllm_cpu: real vLLM\n")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.delenv("CI", raising=False)
    return pytester


def test_a_docker_fixture_without_the_marker_is_refused(tier_dir: pytest.Pytester) -> None:
    tier_dir.makepyfile(test_unmarked=UNMARKED)
    result = tier_dir.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*not marked @pytest.mark.docker*", "*test_unmarked.py::test_through_a_fixture*"]
    )
    assert "test_plain" not in result.stderr.str()


def test_marked_docker_tests_are_left_out_of_the_fast_tier(tier_dir: pytest.Pytester) -> None:
    tier_dir.makepyfile(test_marked=MARKED, test_fast="def test_fast():\n    pass\n")
    fast = tier_dir.runpytest_subprocess("-p", "no:cacheprovider", "-m", "not docker")
    fast.assert_outcomes(passed=1, deselected=1)
    full = tier_dir.runpytest_subprocess("-p", "no:cacheprovider")
    full.assert_outcomes(passed=1, skipped=1)  # no daemon here and CI unset: the docker test skips
