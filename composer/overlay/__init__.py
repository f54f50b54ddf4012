"""Offline overlay images: a vendored diff applied onto a local base image.

Owns: recipes (`images/<name>/image.toml`), diff validation, the in-memory patcher (no
git, no patch), and the build steps (read files from the base, build with networking
disabled, verify, label). The same inputs again are a no-op. May import:
`composer.errors`. Public: `build_overlay`, `BuildResult`, `image_labels`,
`load_recipe`, `recipe_names`, `Recipe`, `parse_diff`, `apply_diffs`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "builder": ["BuildResult", "build_overlay", "image_labels"],
        "diff": ["parse_diff"],
        "patch": ["apply_diffs"],
        "recipe": ["Recipe", "load_recipe", "recipe_names"],
    },
)
