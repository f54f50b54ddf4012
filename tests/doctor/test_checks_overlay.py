"""Stale overlay images: labels written by `compose-spec build` against the recipe on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer.doctor.overlay_checks import check_overlay_current, recipe_for_image
from composer.engine.fixes import build_overlay
from composer.overlay.builder import image_labels
from composer.overlay.diff import sha256_hex
from composer.overlay.recipe import load_recipe

from .fakes import make_stack

DIFF = b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
RECIPE = """
[base]
image = "@images.vllm"
[package]
name = "vllm"
[output]
tag = "@images.dflash2"
[verify]
command = ["true"]
[[diffs]]
file = "pr.diff"
sha256 = "{sha}"
"""


def write_recipe(recipes: Path, diff: bytes = DIFF, pinned: bytes | None = None) -> None:
    (recipes / "ov").mkdir(parents=True, exist_ok=True)
    (recipes / "ov" / "pr.diff").write_bytes(diff)
    sha = sha256_hex(diff if pinned is None else pinned)
    (recipes / "ov" / "image.toml").write_text(RECIPE.format(sha=sha))


@pytest.fixture
def overlay(tmp_path: Path, docker_client, make_image):
    """A recipe under tmp_path/images, its local base and an overlay image labelled as built."""
    recipes = tmp_path / "images"
    write_recipe(recipes)
    base = make_image({})
    placeholder = {"vllm": base, "dflash2": "pending"}
    recipe = load_recipe(recipes, "ov", placeholder)
    labels = image_labels(recipe, docker_client.images.get(base), list(recipe.diffs))  # type: ignore[arg-type]
    built = make_image(labels)
    stack = make_stack(tmp_path, environ={"VLLM_IMAGE": base, "DFLASH2_IMAGE": built})
    return stack, recipes, built


@pytest.mark.docker
def test_overlay_matching_its_recipe_is_ok(overlay, docker_client) -> None:
    stack, recipes, _ = overlay
    found = check_overlay_current(stack, stack.variant("dflash2"), docker_client, recipes)
    assert found is not None and found.status == "ok" and "matches recipe ov" in found.detail
    assert check_overlay_current(stack, stack.variant("mtp"), docker_client, recipes) is None


@pytest.mark.docker
def test_overlay_with_a_repinned_diff_is_stale(overlay, docker_client) -> None:
    stack, recipes, _ = overlay
    write_recipe(recipes, DIFF.replace(b"a = 2", b"a = 3"))
    found = check_overlay_current(stack, stack.variant("dflash2"), docker_client, recipes, Path(".env.demo"))
    assert found.status == "warn" and "recipe-hash" in found.detail and "diffs" in found.detail
    assert found.fix == "compose-spec --env-file .env.demo build ov"


@pytest.mark.docker
def test_diff_changed_since_pinned_warns(overlay, docker_client) -> None:
    stack, recipes, _ = overlay
    write_recipe(recipes, DIFF.replace(b"a = 2", b"a = 4"), pinned=DIFF)
    found = check_overlay_current(stack, stack.variant("dflash2"), docker_client, recipes)
    assert found.status == "warn" and "differs from its sha256 pin" in found.detail
    assert "--pin" in found.fix


@pytest.mark.docker
def test_image_without_overlay_labels_warns(tmp_path: Path, docker_client, scratch_image: str) -> None:
    recipes = tmp_path / "images"
    write_recipe(recipes)
    stack = make_stack(tmp_path, environ={"DFLASH2_IMAGE": scratch_image})
    found = check_overlay_current(stack, stack.variant("dflash2"), docker_client, recipes)
    assert found.status == "warn" and "no overlay labels" in found.detail


def test_recipe_lookup_and_rebuild_command(tmp_path: Path) -> None:
    write_recipe(tmp_path)
    images = {"vllm": "base:1", "dflash2": "overlay:1"}
    assert recipe_for_image(tmp_path, "overlay:1", images).name == "ov"
    assert recipe_for_image(tmp_path, "base:1", images) is None
    assert build_overlay("dflash2", Path(".env")) == "compose-spec build dflash2"
    assert build_overlay("dflash2", None) == "compose-spec build dflash2"


def test_two_recipes_writing_the_image_fail_naming_both(tmp_path: Path) -> None:
    """Regression: the first recipe found was silently taken as the image's recipe."""
    recipes = tmp_path / "images"
    write_recipe(recipes)
    (recipes / "copy").mkdir()
    (recipes / "copy" / "image.toml").write_text((recipes / "ov" / "image.toml").read_text())
    stack = make_stack(tmp_path, environ={"VLLM_IMAGE": "base:1", "DFLASH2_IMAGE": "overlay:1"})
    found = check_overlay_current(stack, stack.variant("dflash2"), None, recipes)  # type: ignore[arg-type]
    assert found is not None and found.status == "fail"
    assert "recipes copy and ov both write overlay:1" in found.detail and "own output.tag" in found.fix
