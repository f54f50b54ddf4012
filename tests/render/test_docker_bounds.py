"""The bounds compose-spec enforces are Docker's own: what it accepts, compose and the
daemon accept too (real `docker compose config` and the real engine)."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from composer.render.files import render_all
from composer.stack import values as v
from composer.stack.model import Stack

pytestmark = pytest.mark.docker


def _compose_config(compose_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "compose", "-f", str(compose_file), "config", "--format", "json"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "VLLM_API_KEY": "x", "HOME": str(Path.home())},
        timeout=60,
    )


def test_longest_duration_is_the_longest_compose_accepts(default_stack: Stack, tmp_path: Path) -> None:
    longest = replace(default_stack, start_period=v.MAX_DURATION, stop_grace_period=v.MAX_DURATION)
    compose_file = next(f for f in render_all(longest, ["baseline"], tmp_path) if f.path.suffix == ".yml")
    compose_file.path.write_text(compose_file.content)
    assert _compose_config(compose_file.path).returncode == 0
    beyond = compose_file.content.replace(
        f"start_period: {v.MAX_DURATION}s", f"start_period: {v.MAX_DURATION + 1}s"
    )
    compose_file.path.write_text(beyond)
    refused = _compose_config(compose_file.path)
    assert refused.returncode != 0 and "invalid duration" in refused.stderr
    with pytest.raises(ValueError):
        v.parse_duration(v.MAX_DURATION + 1)


REFERENCES = [
    "vllm-sim:latest",
    "UPPER CASE:tag with space",
    "vllm/Vllm-openai:v1",
    "a___b",
    "a__b/c--d.e_f",
    "vllm-openai:.tag",
    "vllm-openai:_tag",
    "vllm-openai:" + "t" * 128,
    "vllm-openai:" + "t" * 129,
    "localhost:5000/team/vllm:cu128",
    "Registry.Example/a:b",
    "[::1]:5000/x:y",
    "a:b:c",
    "x@sha256:" + "0" * 64,
    "x@sha256:abc",
]


@pytest.mark.parametrize("reference", REFERENCES)
def test_image_references_accepted_are_accepted_by_the_engine(docker_client, reference: str) -> None:
    """Docker's verdict for a reference compose-spec accepts is never `invalid reference format`;
    the references the engine refuses are refused before anything runs."""
    from docker.errors import APIError, ImageNotFound

    try:
        docker_client.images.get(reference)
        engine_accepts = True
    except ImageNotFound:
        engine_accepts = True
    except APIError as err:
        engine_accepts = "invalid reference format" not in str(err)
    try:
        v.parse_image_ref(reference)
        ours = True
    except ValueError:
        ours = False
    assert not ours or engine_accepts, f"compose-spec accepts {reference!r}, the engine refuses it"
