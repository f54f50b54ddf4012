"""Overlay image check: a local overlay image whose labels (`overlay.builder.image_labels`)
no longer match its recipe, or whose diff files differ from their pins, is stale; two recipes
writing the same tag fail it."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from composer import labels as label_names
from composer.doctor.preflight import Finding
from composer.engine import fixes
from composer.errors import ComposerError
from composer.stack.model import Stack, Variant

if TYPE_CHECKING:
    import docker

    from composer.overlay.recipe import Recipe

_current = functools.partial(Finding, "image-current")


def recipe_for_image(recipes_dir: Path, image: str, images: dict[str, str]) -> Recipe | None:
    """The overlay recipe whose output tag is `image`, or None (not an overlay image)."""
    from composer.overlay.recipe import load_recipe, recipe_names

    for name in recipe_names(recipes_dir):
        try:
            recipe = load_recipe(recipes_dir, name, images)
        except ComposerError:
            continue  # a broken recipe is reported by `compose-spec build`, not here
        if recipe.tag == image:
            return recipe
    return None


def check_overlay_current(
    stack: Stack,
    variant: Variant,
    client: docker.DockerClient,
    recipes_dir: Path,
    env_file: Path | None = None,
) -> Finding | None:
    """ok when the overlay image records its recipe's current inputs; None for non-overlay images."""
    from composer.overlay.builder import image_labels
    from composer.overlay.diff import sha256_hex
    from composer.overlay.recipe import recipes_writing
    from composer.overlay.steps import local_image

    image = stack.image(variant.image_key)
    writers = recipes_writing(recipes_dir, image, stack.images)
    if len(writers) > 1:
        return _current(
            "fail",
            f"recipes {' and '.join(writers)} both write {image}: cannot tell which one it should match",
            f"give each recipe its own output.tag ({recipes_dir}/<name>/image.toml)",
        )
    recipe = recipe_for_image(recipes_dir, image, stack.images)
    if recipe is None:
        return None
    built, base = local_image(client, image), local_image(client, recipe.base)
    if built is None:
        return _contained_in_base(client, recipe, image)  # else the image check already fails
    rebuild = fixes.build_overlay(recipe.name, env_file)
    labels = built.labels or {}
    if labels.get(label_names.OVERLAY_RECIPE) != recipe.name:
        return _current(
            "warn",
            f"{image} has no overlay labels for recipe {recipe.name}: not built by `compose-spec build`",
            rebuild,
        )
    changed = [  # a pinned diff file that no longer matches its pin
        f"{d.file.name} differs from its sha256 pin"
        for d in recipe.diffs
        if d.sha256 and d.file.is_file() and sha256_hex(d.file.read_bytes()) != d.sha256
    ]
    if changed:
        return _current(
            "warn",
            f"{image}: " + "; ".join(changed),
            f"review the diff, then compose-spec build {recipe.name} --pin",
        )
    if base is None:
        return _current(
            "warn",
            f"base image {recipe.base} is not local: cannot tell whether {image} is current",
            f"load {recipe.base} (docker load -i FILE.tar)",
        )
    wanted = image_labels(recipe, base, recipe.diffs)
    prefix = f"{label_names.OVERLAY_PREFIX}."
    stale = [key.removeprefix(prefix) for key, value in wanted.items() if labels.get(key) != value]
    if stale:
        return _current(
            "warn",
            f"{image} is stale: its labels differ from recipe {recipe.name} in " + ", ".join(stale),
            rebuild,
        )
    if labels.get(label_names.OVERLAY_FROM_BASE):
        return _current(
            "ok", f"{image} is {recipe.base} unchanged: it already contains recipe {recipe.name}'s change"
        )
    return _current("ok", f"{image} matches recipe {recipe.name} and base {recipe.base}")


def _contained_in_base(client: docker.DockerClient, recipe: Recipe, image: str) -> Finding | None:
    """A warning that names the fix when the missing overlay's base already holds its change."""
    from composer.overlay.builder import base_contains_change

    try:
        if not base_contains_change(client, recipe):
            return None
    except ComposerError:
        return None  # `compose-spec build` names what is wrong with the recipe or its base
    return _current(
        "warn",
        f"{image} is not built, and its base {recipe.base} already contains recipe {recipe.name}'s change",
        f"compose-spec build {recipe.name} --use-base",
    )
