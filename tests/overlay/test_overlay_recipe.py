"""Recipe loading, stack image references, per-base diff lists and pinning (no Docker)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from composer.errors import UsageError
from composer.overlay.recipe import load_recipe, pin_recipe, recipe_names, recipes_writing, verify_argv
from composer.stack.load import load_stack

REPO = Path(__file__).resolve().parents[2]
IMAGES = {"vllm": "vllm-openai:verified", "dflash2": "vllm-openai:dflash2"}
RECIPE = """\
# a comment that must survive pinning
[base]
image = "@images.vllm"

[package]
name = "vllm"

[output]
tag = "@images.dflash2"

[verify]
command = ["python3", "-c", "import vllm"]

[[diffs]]
file = "one.diff"   # first
sha256 = ""

[[diffs]]
sha256 = "abc"
file = "two.diff"

[[for_base]]
match = "sim:*"
verify = ["true"]

[[for_base.diffs]]
file = "sim.diff"
"""


def write(tmp_path: Path, text: str = RECIPE, name: str = "r") -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True)
    (folder / "image.toml").write_text(text)
    return folder / "image.toml"


def test_references_resolve_to_stack_images(tmp_path: Path) -> None:
    write(tmp_path)
    recipe = load_recipe(tmp_path, "r", IMAGES)
    assert (recipe.base, recipe.tag, recipe.package) == (
        "vllm-openai:verified",
        "vllm-openai:dflash2",
        "vllm",
    )
    assert [d.name for d in recipe.diffs] == ["one.diff", "two.diff"]
    assert recipe.diffs[0].file == (tmp_path / "r" / "one.diff").resolve()
    assert recipe.locate[:2] == ("python3", "-c") and "find_spec('vllm')" in recipe.locate[2]
    assert recipe.for_base is None


def test_matching_base_selects_its_own_diffs_and_verify(tmp_path: Path) -> None:
    write(tmp_path)
    recipe = load_recipe(tmp_path, "r", {**IMAGES, "vllm": "sim:latest"})
    assert [d.name for d in recipe.diffs] == ["sim.diff"]
    assert recipe.verify == ("true",)
    assert recipe.for_base == 0


def test_unknown_recipe_lists_known_ones(tmp_path: Path) -> None:
    write(tmp_path, name="a")
    write(tmp_path, name="b")
    assert recipe_names(tmp_path) == ["a", "b"]
    with pytest.raises(UsageError, match=r"unknown image recipe .c. .*: choose one of a, b"):
        load_recipe(tmp_path, "c", IMAGES)
    with pytest.raises(UsageError, match="unknown image recipe"):
        load_recipe(tmp_path, "../a", IMAGES)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'image = "@images.vllm"',
            'image = "@images.nope"',
            r"'@images.nope' is not a stack image: use one of",
        ),
        ('[verify]\ncommand = ["python3", "-c", "import vllm"]', "", "verify.command is required"),
        ('name = "vllm"', 'name = "vllm"\nfrobnicate = 1', "unknown key package.frobnicate: allowed are"),
        ("# a comment that must survive pinning", "colour = 1", "unknown key colour"),
        ('file = "one.diff"', 'file = "/abs/one.diff"', "must be relative to the recipe folder"),
        ('[output]\ntag = "@images.dflash2"', "", "output.tag is required"),
        ("[[diffs]]", "[broken", "not valid TOML"),
        ('tag = "@images.dflash2"', 'tag = "@images.vllm"', "the overlay needs its own tag"),
        (
            'file = "one.diff"',
            'file = "one.diff"\nstrip = -1',
            r"diffs.strip must be a whole number .* got -1",
        ),
        ('file = "one.diff"', 'file = "one.diff"\nstrip = "1"', r"diffs.strip must be .*like `patch -p1`"),
        ('file = "one.diff"', 'file = "one.diff"\nstrip = true', "diffs.strip must be"),
        ('"import vllm"]', '"import vllm"]\nskip_imports = "vllm.x"', "verify.skip_imports must be a list"),
    ],
)
def test_bad_recipes_are_usage_errors(tmp_path: Path, old: str, new: str, message: str) -> None:
    assert old in RECIPE
    write(tmp_path, RECIPE.replace(old, new, 1))
    with pytest.raises(UsageError, match=message):
        load_recipe(tmp_path, "r", IMAGES)


def test_pin_rewrites_only_sha256_and_keeps_comments(tmp_path: Path) -> None:
    path = write(tmp_path)
    recipe = load_recipe(tmp_path, "r", IMAGES)
    changed = pin_recipe(recipe, {"one.diff": "1" * 64, "two.diff": "abc"})
    assert changed == ["one.diff"]
    text = path.read_text()
    assert "# a comment that must survive pinning" in text and 'file = "one.diff"   # first' in text
    data = tomllib.loads(text)
    assert [d["sha256"] for d in data["diffs"]] == ["1" * 64, "abc"]
    assert "sha256" not in data["for_base"][0]["diffs"][0]
    assert sorted(p.name for p in path.parent.iterdir()) == ["image.toml"]


def test_pin_of_a_for_base_diff_inserts_the_key(tmp_path: Path) -> None:
    path = write(tmp_path)
    recipe = load_recipe(tmp_path, "r", {**IMAGES, "vllm": "sim:latest"})
    assert pin_recipe(recipe, {"sim.diff": "2" * 64}) == ["sim.diff"]
    data = tomllib.loads(path.read_text())
    assert data["for_base"][0]["diffs"][0]["sha256"] == "2" * 64
    assert data["diffs"][0]["sha256"] == ""


def test_shipped_dflash2_recipe_with_reference_and_demo_stacks() -> None:
    reference = load_stack([REPO / "composer.toml"], None, environ={})
    recipe = load_recipe(REPO / "images", "dflash2", reference.images)
    assert (recipe.base, recipe.tag) == (reference.images["vllm"], reference.images["dflash2"])
    assert [d.name for d in recipe.diffs] == ["pr-52816.diff"]
    assert recipe.diffs[0].source == "https://github.com/vllm-project/vllm/pull/52816.diff"
    demo = load_stack([REPO / "composer.toml"], REPO / ".env.demo", environ={})
    recipe = load_recipe(REPO / "images", "dflash2", demo.images)
    assert (recipe.base, recipe.tag) == ("vllm-sim:latest", "vllm-sim:dflash2")
    assert recipe.diffs[0].file == REPO / "images" / "sim" / "overlay" / "sim-dflash.diff"


def test_strip_and_skip_imports_are_read_and_change_the_fingerprint(tmp_path: Path) -> None:
    write(tmp_path / "plain")
    plain = load_recipe(tmp_path / "plain", "r", IMAGES)
    assert [d.strip for d in plain.diffs] == [None, None] and plain.skip_imports == ()
    text = RECIPE.replace('file = "one.diff"', 'file = "one.diff"\nstrip = 1', 1)
    text = text.replace('"import vllm"]', '"import vllm"]\nskip_imports = ["vllm.gpu_only.*"]', 1)
    write(tmp_path / "stripped", text)
    stripped = load_recipe(tmp_path / "stripped", "r", IMAGES)
    assert [d.strip for d in stripped.diffs] == [1, None] and stripped.skip_imports == ("vllm.gpu_only.*",)
    assert stripped.fingerprint() != plain.fingerprint()


def test_two_recipes_writing_the_same_tag_are_refused_with_both_names(tmp_path: Path) -> None:
    """Regression: two recipes with one output tag made doctor misreport the overlay."""
    write(tmp_path, name="alpha")
    write(tmp_path, RECIPE.replace('tag = "@images.dflash2"', 'tag = "vllm-openai:dflash2"'), name="beta")
    write(tmp_path, RECIPE.replace('tag = "@images.dflash2"', 'tag = "other:1"'), name="gamma")
    assert recipes_writing(tmp_path, "vllm-openai:dflash2", IMAGES) == ["alpha", "beta"]
    for name, other in (("alpha", "beta"), ("beta", "alpha")):
        with pytest.raises(
            UsageError, match=f"recipes {name} and {other} both write the image vllm-openai:dflash2"
        ):
            load_recipe(tmp_path, name, IMAGES)
    assert load_recipe(tmp_path, "gamma", IMAGES).tag == "other:1"


def test_verify_override_is_split_like_a_shell_line() -> None:
    assert verify_argv("python3 -c 'import vllm.x; print(1)'") == ("python3", "-c", "import vllm.x; print(1)")
    with pytest.raises(UsageError, match="--verify needs a command"):
        verify_argv("  ")
    with pytest.raises(UsageError, match="No closing quotation"):
        verify_argv("python3 -c 'import")


def test_a_verify_command_is_printed_readably_without_shell_quote_soup() -> None:
    import shlex

    from composer.overlay.builder import Verification, readable

    command = ("python3", "-c", "import typing; assert 'dflash' in M, 'dflash is not a method'")
    line = Verification((), command).describe()
    assert line == "run python3 -c \"import typing; assert 'dflash' in M, 'dflash is not a method'\""
    assert shlex.split(line.removeprefix("run ")) == list(command)  # it pastes as the same argv
    odd = ["echo", "a b", "$x 'y'"]  # double quotes would expand $x: shell quoting stays
    assert readable(odd) == shlex.join(odd)
