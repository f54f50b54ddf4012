"""Placement and live sets: GPU sets per replica, replicas, `[gateway] live`; every bad one
refused at load (exit 2, one line, naming the GPUs and the variants) before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from composer.errors import ConfigError
from composer.stack.load import load_stack
from composer.stack.placement import live_members, parse_placement
from tests.conftest import REPO
from tests.stack.test_bad_input import refused

LIVE = """
[gateway]
live = ["baseline", "mtp"]
[variants.baseline]
gpus = "0,1,2,3"
[variants.mtp]
gpus = "4,5,6,7"
"""


def _stack(tmp_path: Path, toml: str, environ: dict[str, str] | None = None):
    extra = tmp_path / "live.toml"
    extra.write_text(toml, encoding="utf-8")
    return load_stack([REPO / "composer.toml", extra], None, environ=environ or {})


@pytest.mark.parametrize(
    ("raw", "sets"),
    [
        ("0,1,2,3", (("0", "1", "2", "3"),)),
        ([0, 1], (("0", "1"),)),
        (["0,1", "2,3"], (("0", "1"), ("2", "3"))),
        ("0,1;2,3", (("0", "1"), ("2", "3"))),
        (None, ()),
    ],
)
def test_placement_forms(raw: object, sets: tuple) -> None:
    assert parse_placement(raw) == sets


@pytest.mark.parametrize("raw", ["", "all", "0,0", ["0,1", 2], True, "a,b"])
def test_bad_placements_are_refused(raw: object) -> None:
    with pytest.raises(ValueError, match="GPU list"):
        parse_placement(raw)


def test_a_live_set_loads_with_one_member_per_replica(tmp_path: Path) -> None:
    stack = _stack(tmp_path, LIVE + '[variants.dflash2]\ngpus = ["8,9", "10,11"]\n')
    assert stack.gateway.live == ("baseline", "mtp")
    assert stack.variants["dflash2"].replicas == 2
    members = live_members(stack, ["mtp", "dflash2"])
    assert [(m.name, m.gpus) for m in members] == [
        ("mtp/1", ("4", "5", "6", "7")),
        ("dflash2/1", ("8", "9")),
        ("dflash2/2", ("10", "11")),
    ]


def test_overlapping_gpu_sets_are_refused_naming_the_gpus_and_the_variants(tmp_path: Path) -> None:
    line = refused(tmp_path, extra_toml=LIVE.replace('"4,5,6,7"', '"3,4,5,6"'))
    assert (
        "GPU sets overlap" in line and "baseline/1 (GPUs 0,1,2,3)" in line and "mtp/1 (GPUs 3,4,5,6)" in line
    )
    assert "share GPU 3" in line


def test_replicas_of_one_variant_may_not_share_a_gpu(tmp_path: Path) -> None:
    line = refused(tmp_path, extra_toml='[gateway]\nlive = ["mtp"]\n[variants.mtp]\ngpus = ["0,1", "1,2"]\n')
    assert "mtp/1 (GPUs 0,1) and mtp/2 (GPUs 1,2) share GPU 1" in line


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (
            '[variants.mtp]\ngpus = ["0,1", "2,3"]\nreplicas = 3\n',
            "replicas = 3 but variants.mtp.gpus lists 2",
        ),
        ('[variants.mtp]\ngpus = "0,1"\nreplicas = 2\n', "expected one GPU set per replica"),
        ("[variants.mtp]\nreplicas = 0\n", "a whole number from 1 to 64"),
        ('[gateway]\nlive = ["baseline", "nope"]\n', "unknown variant 'nope' in the live set"),
        ('[gateway]\nlive = ["mtp", "mtp"]\n', "a list of distinct variant names"),
        ('[gateway]\nlive = ["baseline", "mtp"]\n', "variants.baseline.gpus is not set"),
        ('[variants.mtp]\ngpus = "0,x"\n', "invalid variants.mtp.gpus"),
    ],
)
def test_bad_live_settings_exit_2(tmp_path: Path, toml: str, expected: str) -> None:
    assert expected in refused(tmp_path, extra_toml=toml)


def test_without_gpus_the_sets_are_still_checked(tmp_path: Path) -> None:
    """GPU_DEVICES=none (the simulator): no device is reserved, but the sets must stay disjoint."""
    none = {"GPU_DEVICES": "none"}
    unplaced = _stack(tmp_path, '[gateway]\nlive = ["baseline", "mtp"]\n', none)
    assert [m.gpus for m in live_members(unplaced, ["baseline", "mtp"])] == [(), ()]
    with pytest.raises(ConfigError, match="share GPU 1"):
        _stack(tmp_path, LIVE.replace('"4,5,6,7"', '"1"'), none)


def test_up_with_overlapping_sets_exits_2_before_touching_docker(tmp_path: Path) -> None:
    """`up baseline mtp`: the overlap is refused before Docker is asked anything (no daemon here)."""
    extra = tmp_path / "overlap.toml"
    extra.write_text('[variants.baseline]\ngpus = "0,1"\n[variants.mtp]\ngpus = "1,2"\n', encoding="utf-8")
    (tmp_path / "none.env").write_text("")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "GPU_", "GATEWAY_"))},
        "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock",
        "VLLM_API_KEY": "Zq8vN3kL1pX7rT4wB9yC2mF6hJ0sD5gA",
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "composer", "--env-file", str(tmp_path / "none.env"), "--stack",
         str(REPO / "composer.toml"), "--stack", str(extra), "up", "baseline", "mtp"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr.count("\n") == 1
        and "baseline/1 (GPUs 0,1) and mtp/1 (GPUs 1,2) share GPU 1" in done.stderr
    )
    assert not (tmp_path / "state").exists()  # no run file, no lock, no history
