"""The test tiers: a test that needs the Docker engine without the `docker` marker is a
collection error, so `pytest -m "not docker"` (make check) never needs the daemon."""

from __future__ import annotations

import itertools
import re

import pytest

from tests.conftest import REPO, work_unit

pytest_plugins = ["pytester"]

UNMARKED = """
import itertools
import re

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
import itertools
import re

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


TIER_MARKERS = ("docker", "slow", "timing", "vllm_cpu")


def _pytest_selections(target: str) -> list[str]:
    """The `-m` expression of each pytest command in a Makefile target's recipe ("" for none),
    with the Makefile's `NAME := ...` variables expanded."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    variables = dict(re.findall(r"^([A-Z_]+) := (.+)$", makefile, re.MULTILINE))
    recipe = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
    commands = [line for line in recipe.splitlines() if "pytest" in line.lower()]
    found = [re.search(r'-m "([^"]+)"', line) for line in commands]

    def expand(text: str) -> str:
        return re.sub(r"\$\(([A-Z_]+)\)", lambda v: variables.get(v.group(1), v.group(0)), text)

    return [expand(m.group(1)) if m else "" for m in found]


def test_make_check_runs_each_fast_test_once_and_make_test_runs_every_test(pytester: pytest.Pytester) -> None:
    combos = [c for n in range(len(TIER_MARKERS) + 1) for c in itertools.combinations(TIER_MARKERS, n)]
    tests = [
        "".join(f"@pytest.mark.{m}\n" for m in combo)
        + f"def test_{'_'.join(combo) or 'plain'}():\n    pass\n"
        for combo in combos
    ]
    pytester.makepyfile(test_combos="import pytest\n\n" + "\n".join(tests))
    pytester.makeini("[pytest]\nmarkers =\n" + "".join(f"    {m}: tier\n" for m in TIER_MARKERS))

    def selected(expression: str) -> list[str]:
        args = ["-m", expression] if expression else []
        result = pytester.runpytest(
            "-p", "no:cacheprovider", "--collect-only", "-q", "--strict-markers", *args
        )
        return [line.split("::")[1] for line in result.outlines if "::" in line]

    check = [name for expression in _pytest_selections("check") for name in selected(expression)]
    fast = [f"test_{'_'.join(c) or 'plain'}" for c in combos if "docker" not in c and "slow" not in c]
    assert len(_pytest_selections("check")) == 2  # in parallel, then the timing tests alone
    assert sorted(check) == sorted(fast)  # each fast test once, no slow or docker test
    full = [name for expression in _pytest_selections("test") for name in selected(expression)]
    assert sorted(full) == sorted(
        f"test_{'_'.join(c) or 'plain'}" for c in combos
    )  # make test: every test once


def test_a_docker_worker_takes_a_whole_module_or_the_whole_real_vllm_tier() -> None:
    assert work_unit("tests/swap/test_swap.py::test_one[mtp]") == "tests/swap/test_swap.py"
    assert work_unit("tests/swap/test_swap.py::Suite::test_two") == "tests/swap/test_swap.py"
    tier = {work_unit(f"tests/vllm_cpu/{m}.py::test_x") for m in ("test_swaps", "test_continue")}
    assert tier == {"tests/vllm_cpu/"}
    assert "--dist loadfile" in (REPO / "Makefile").read_text(encoding="utf-8")  # what selects it
