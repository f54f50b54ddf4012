"""Overlay builds against the real Docker engine, with a stand-in base image.

Every refusal is checked through the CLI: exit code 1, one error line, no image created.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from composer import labels as label_names
from composer.cli import main
from composer.errors import ImageBuildError
from composer.overlay.builder import base_contains_change, build_overlay
from composer.overlay.diff import sha256_hex
from composer.overlay.recipe import load_recipe
from composer.stack.load import load_stack

from .conftest import SESSION, SESSION_LABEL, TEST_LABELS, write_recipe
from .diffs import ADD_DFLASH, one_file

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.docker
LABELS = TEST_LABELS


def stack_images(base: str, tag: str) -> dict[str, str]:
    return load_stack(
        [REPO / "composer.toml"], None, environ={"VLLM_IMAGE": base, "DFLASH2_IMAGE": tag}
    ).images


def cli(tmp_path: Path, monkeypatch, base: str, tag: str, *args: str):
    """Run `compose-spec build r ...` against recipes in tmp_path."""
    monkeypatch.setenv("VLLM_IMAGE", base)
    monkeypatch.setenv("DFLASH2_IMAGE", tag)
    argv = ["--stack", str(REPO / "composer.toml"), "build", "r", "--recipes-dir", str(tmp_path), *args]
    return CliRunner().invoke(main, argv)


def assert_refused(result, *fragments: str) -> str:
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("compose-spec: error: ")
    assert sum(line.startswith("compose-spec: error") for line in lines) == 1
    for fragment in fragments:
        assert fragment in lines[-1]
    return lines[-1]


def no_image(client, tag: str) -> bool:
    return not client.images.list(name=tag)


def no_helpers_left(client) -> bool:
    labels = [label_names.BUILD, f"{SESSION_LABEL}={SESSION}"]
    return not client.containers.list(all=True, filters={"label": labels})


def test_build_labels_verify_noop_and_force(docker_client, standin_base, output_tag, tmp_path) -> None:
    write_recipe(tmp_path, {"dflash.diff": ADD_DFLASH})
    recipe = load_recipe(tmp_path, "r", stack_images(standin_base, output_tag))
    lines: list[str] = []
    result = build_overlay(docker_client, recipe, progress=lines.append, extra_labels=LABELS)
    assert result.status == "built"
    assert result.files == ("vllm/config/methods.py", "vllm/spec/dflash.py")
    assert any(line.startswith("verification passed") for line in lines)
    image = docker_client.images.get(output_tag)
    base = docker_client.images.get(standin_base)
    labels = image.labels
    assert labels[f"{label_names.OVERLAY_PREFIX}.base-id"] == base.id
    assert (
        labels[f"{label_names.OVERLAY_PREFIX}.diffs"]
        == f"dflash.diff=sha256:{sha256_hex(ADD_DFLASH.encode())}"
    )
    assert labels[f"{label_names.OVERLAY_PREFIX}.recipe-hash"] == recipe.fingerprint()
    assert labels[f"{label_names.OVERLAY_PREFIX}.version"] == "0.1.0"
    assert labels[f"{label_names.OVERLAY_PREFIX}.package-dir"] == "/opt/site/vllm"
    # one new layer on top of the base: the COPY of the two patched files
    assert len(image.attrs["RootFS"]["Layers"]) == len(base.attrs["RootFS"]["Layers"]) + 1
    assert no_helpers_left(docker_client)

    again = build_overlay(docker_client, recipe, extra_labels=LABELS)
    assert again.status == "current" and again.image_id == image.id

    forced = build_overlay(docker_client, recipe, force=True, extra_labels=LABELS)
    assert forced.status == "built" and forced.image_id != image.id
    assert no_image(docker_client, image.id)  # the replaced image is gone


def test_a_base_that_already_contains_the_change_is_named_then_used_with_use_base(
    docker_client, standin_base, output_tag, tmp_path, monkeypatch
) -> None:
    write_recipe(tmp_path, {"dflash.diff": ADD_DFLASH})
    first = build_overlay(docker_client, load_recipe(tmp_path, "r", stack_images(standin_base, output_tag)))
    newer_base, reused = first.tag, f"{output_tag.split(':')[0]}-reused:1"
    assert not base_contains_change(
        docker_client, load_recipe(tmp_path, "r", stack_images(standin_base, reused))
    )
    assert base_contains_change(docker_client, load_recipe(tmp_path, "r", stack_images(newer_base, reused)))
    try:
        line = assert_refused(cli(tmp_path, monkeypatch, newer_base, reused), "already contains the change")
        assert "--use-base" in line and no_image(docker_client, reused)
        result = cli(tmp_path, monkeypatch, newer_base, reused, "--use-base")
        assert result.exit_code == 0, result.output
        image, base = docker_client.images.get(reused), docker_client.images.get(newer_base)
        assert image.labels[label_names.OVERLAY_FROM_BASE] == "contains-change"
        assert image.attrs["RootFS"]["Layers"] == base.attrs["RootFS"]["Layers"]  # no file changed
        assert "verification passed" in result.output
    finally:
        with contextlib.suppress(Exception):
            docker_client.images.remove(reused, force=True)


def test_failed_verification_removes_the_image_and_keeps_the_tag(
    docker_client, standin_base, output_tag, tmp_path
) -> None:
    write_recipe(tmp_path, {"dflash.diff": ADD_DFLASH}, verify="raise SystemExit('no dflash here')")
    recipe = load_recipe(tmp_path, "r", stack_images(standin_base, output_tag))
    before = {i.id for i in docker_client.images.list(all=True)}
    with pytest.raises(ImageBuildError, match=r"verification failed .* image removed: no dflash here"):
        build_overlay(docker_client, recipe, extra_labels=LABELS)
    after = {i.id for i in docker_client.images.list(all=True)}
    assert not (after - before)
    assert no_image(docker_client, output_tag)
    assert no_helpers_left(docker_client)


def test_pin_dry_run_writes_nothing_then_pin_writes_the_pin(
    docker_client, standin_base, output_tag, tmp_path, monkeypatch
) -> None:
    """Regression: `build --pin --dry-run` rewrote image.toml, even when the dry run failed."""
    path = write_recipe(tmp_path, {"dflash.diff": ADD_DFLASH}, pins={"dflash.diff": ""})
    unpinned = path.read_bytes()
    refused = cli(tmp_path, monkeypatch, standin_base, output_tag)
    assert_refused(refused, "diff dflash.diff is not pinned", "compose-spec build r --pin")
    dry = cli(tmp_path, monkeypatch, standin_base, output_tag, "--pin", "--dry-run")
    assert dry.exit_code == 0, dry.output
    digest = sha256_hex(ADD_DFLASH.encode())
    assert f"dry run: would pin dflash.diff to sha256 {digest}; {path} unchanged" in dry.output
    assert "dry run passed, nothing built" in dry.output and no_image(docker_client, output_tag)
    assert path.read_bytes() == unpinned
    stale = ADD_DFLASH.replace('     "eagle",\n', '     "eagle3",\n')
    (tmp_path / "r" / "dflash.diff").write_text(stale)
    failed = cli(tmp_path, monkeypatch, standin_base, output_tag, "--pin", "--dry-run")
    assert_refused(failed, "hunk 1/1")
    assert path.read_bytes() == unpinned
    (tmp_path / "r" / "dflash.diff").write_text(ADD_DFLASH)
    built = cli(tmp_path, monkeypatch, standin_base, output_tag, "--pin")
    assert built.exit_code == 0, built.output
    assert f'sha256 = "{digest}"' in path.read_text() and not no_image(docker_client, output_tag)


BROKEN_MODULE = ADD_DFLASH.replace("+BLOCK = 8\n", "+from vllm.spec import helper_the_base_lacks\n")


def test_verification_imports_every_module_the_diff_adds(
    docker_client, standin_base, output_tag, tmp_path
) -> None:
    """Regression: a verify command that passes on a base without the change proved nothing."""
    write_recipe(tmp_path, {"dflash.diff": BROKEN_MODULE}, verify="import vllm")
    recipe = load_recipe(tmp_path, "r", stack_images(standin_base, output_tag))
    before = {i.id for i in docker_client.images.list(all=True)}
    with pytest.raises(ImageBuildError) as err:
        build_overlay(docker_client, recipe, extra_labels=LABELS)
    message = str(err.value)
    assert "verification failed in the new image (exit 1 from importing the added modules)" in message
    assert (
        "cannot import vllm.spec.dflash (ImportError: cannot import name 'helper_the_base_lacks'" in message
    )
    assert not ({i.id for i in docker_client.images.list(all=True)} - before)
    assert no_image(docker_client, output_tag) and no_helpers_left(docker_client)

    write_recipe(tmp_path, {"dflash.diff": ADD_DFLASH}, verify="import vllm")
    lines: list[str] = []
    recipe = load_recipe(tmp_path, "r", stack_images(standin_base, output_tag))
    assert build_overlay(docker_client, recipe, progress=lines.append, extra_labels=LABELS).status == "built"
    assert (
        "verifying (offline): import 1 added module(s) (vllm.spec.dflash), then run python3 -c"
        in "\n".join(lines)
    )


def test_verify_option_replaces_the_recipe_command(
    docker_client, standin_base, output_tag, tmp_path, monkeypatch
) -> None:
    write_recipe(tmp_path, {"dflash.diff": ADD_DFLASH})
    custom = "python3 -c 'import vllm.spec.dflash as d; raise SystemExit(f\"custom check saw {d.BLOCK}\")'"
    failed = cli(tmp_path, monkeypatch, standin_base, output_tag, "--verify", custom)
    assert_refused(failed, "verification failed in the new image", "image removed: custom check saw 8")
    assert no_image(docker_client, output_tag)
    assert cli(tmp_path, monkeypatch, standin_base, output_tag).exit_code == 0
    image_id = docker_client.images.get(output_tag).id
    again = cli(tmp_path, monkeypatch, standin_base, output_tag, "--verify", custom)
    assert_refused(again, "verification failed in the image", "the image is kept: custom check saw 8")
    assert docker_client.images.get(output_tag).id == image_id
    passing = cli(tmp_path, monkeypatch, standin_base, output_tag, "--verify", "python3 -c 'import vllm'")
    assert (
        passing.exit_code == 0 and "up to date" in passing.output and "verification passed" in passing.output
    )


PACKAGE_RELATIVE_WITH_DATA = """diff --git a/config/methods.py b/config/methods.py
--- a/config/methods.py
+++ b/config/methods.py
@@ -3,5 +3,6 @@
 METHODS = (
     "ngram",
     "eagle",
+    "dflash",
     "mtp",
 )
diff --git a/config/limits.json b/config/limits.json
new file mode 100644
--- /dev/null
+++ b/config/limits.json
@@ -0,0 +1 @@
+{"dflash": 15}
"""


def test_a_package_relative_diff_with_a_data_file_builds_with_strip(
    docker_client, standin_base, output_tag, tmp_path
) -> None:
    """Regressions: strip = 1 for package-relative paths; a .json inside the package is applied."""
    verify = (
        "import json, pathlib, vllm.config.methods as m; "
        "assert json.loads((pathlib.Path(m.__file__).parent / 'limits.json').read_text()) == {'dflash': 15}; "
        "assert 'dflash' in m.METHODS"
    )
    write_recipe(tmp_path, {"backport.diff": PACKAGE_RELATIVE_WITH_DATA}, verify=verify, strip=1)
    recipe = load_recipe(tmp_path, "r", stack_images(standin_base, output_tag))
    result = build_overlay(docker_client, recipe, extra_labels=LABELS)
    assert result.status == "built"
    assert result.files == ("vllm/config/limits.json", "vllm/config/methods.py")


def test_missing_diff_and_missing_base_in_one_line(tmp_path, monkeypatch) -> None:
    write_recipe(tmp_path, {"dflash.diff": ADD_DFLASH})
    (tmp_path / "r" / "dflash.diff").unlink()
    result = cli(tmp_path, monkeypatch, "vct-missing-base:none", "vct-missing-out:none")
    line = assert_refused(
        result, "cannot build r: put it at ", "dflash.diff, then run `compose-spec build r --pin`"
    )
    assert "load the base image vct-missing-base:none" in line and "never pull" in line


def test_missing_base_is_refused(docker_client, tmp_path, monkeypatch) -> None:
    write_recipe(tmp_path, {"dflash.diff": ADD_DFLASH})
    result = cli(tmp_path, monkeypatch, "vct-missing-base:none", "vct-missing-out:none")
    assert_refused(result, "load the base image vct-missing-base:none into the local Docker engine")
    assert no_image(docker_client, "vct-missing-out:none")


ABSOLUTE = "--- /opt/site/vllm/a.py\n+++ /opt/site/vllm/a.py\n@@ -1 +1 @@\n-a\n+b\n"
BINARY = "diff --git a/vllm/a.py b/vllm/a.py\nBinary files a/vllm/a.py and b/vllm/a.py differ\n"


@pytest.mark.parametrize(
    ("diff", "message"),
    [
        (one_file("csrc/attention/paged.cu"), "csrc/attention/paged.cu: outside the package vllm/"),
        (one_file("vllm/_C/ops.cpp"), "vllm/_C/ops.cpp: native source (C/C++/CUDA/Cython); the overlay"),
        (one_file("vllm/../../../etc/evil.py"), "contains '..'"),
        (ABSOLUTE, "absolute path '/opt/site/vllm/a.py' is not allowed"),
        (BINARY, "vllm/a.py: a binary file inside vllm/"),
    ],
)
def test_bad_diffs_are_refused(
    docker_client, standin_base, output_tag, tmp_path, monkeypatch, diff: str, message: str
) -> None:
    write_recipe(tmp_path, {"bad.diff": diff})
    assert_refused(cli(tmp_path, monkeypatch, standin_base, output_tag), "diff bad.diff: ", message)
    assert no_image(docker_client, output_tag)


def test_sha256_mismatch_is_refused(docker_client, standin_base, output_tag, tmp_path, monkeypatch) -> None:
    write_recipe(tmp_path, {"dflash.diff": ADD_DFLASH}, pins={"dflash.diff": "0" * 64})
    line = assert_refused(cli(tmp_path, monkeypatch, standin_base, output_tag), "diff dflash.diff changed")
    assert f"sha256 is {sha256_hex(ADD_DFLASH.encode())}, the recipe pins {'0' * 64}" in line
    assert "run `compose-spec build r --pin`" in line
    assert no_image(docker_client, output_tag)


def test_hunk_that_does_not_apply_names_file_and_hunk(
    docker_client, standin_base, output_tag, tmp_path, monkeypatch
) -> None:
    stale = ADD_DFLASH.replace('     "eagle",\n', '     "eagle3",\n')
    write_recipe(tmp_path, {"stale.diff": stale})
    line = assert_refused(cli(tmp_path, monkeypatch, standin_base, output_tag))
    expected = "diff stale.diff: vllm/config/methods.py: hunk 1/1 @@ -3,5 +3,6 @@ does not match"
    assert line.endswith(f"{expected} the base image's file")
    assert no_image(docker_client, output_tag)
    assert no_helpers_left(docker_client)


def test_fresh_clone_says_what_to_put_where(tmp_path, monkeypatch) -> None:
    """The shipped reference recipe without its diff and base image: one actionable line."""
    (tmp_path / "dflash2").mkdir()
    shipped = (REPO / "images" / "dflash2" / "image.toml").read_text()
    (tmp_path / "dflash2" / "image.toml").write_text(shipped)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VLLM_IMAGE", "vct-missing-verified:none")
    argv = ["--stack", str(REPO / "composer.toml"), "build", "dflash2", "--recipes-dir", str(tmp_path)]
    line = assert_refused(CliRunner().invoke(main, argv))
    assert line == (
        "compose-spec: error: cannot build dflash2: download "
        "https://github.com/vllm-project/vllm/pull/52816.diff on a connected machine and put it at "
        "dflash2/pr-52816.diff, then run `compose-spec build dflash2 --pin`; load the base image "
        "vct-missing-verified:none into the local Docker engine (e.g. `docker load -i FILE.tar`; "
        "builds never pull)"
    )


def test_pinned_base_id_must_match(docker_client, standin_base, output_tag, tmp_path, monkeypatch) -> None:
    path = write_recipe(tmp_path, {"dflash.diff": ADD_DFLASH})
    path.write_text(path.read_text().replace("[base]\n", '[base]\nid = "sha256:' + "0" * 64 + '"\n'))
    base_id = docker_client.images.get(standin_base).id
    line = assert_refused(cli(tmp_path, monkeypatch, standin_base, output_tag))
    assert line.endswith(f"base image {standin_base} is {base_id}, the recipe pins sha256:{'0' * 64}")
    assert no_image(docker_client, output_tag)


def test_every_failing_hunk_is_reported_through_the_cli(
    docker_client, standin_base, output_tag, tmp_path, monkeypatch
) -> None:
    stale = ADD_DFLASH.replace('     "eagle",\n', '     "eagle3",\n') + one_file("vllm/__init__.py")
    write_recipe(tmp_path, {"stale.diff": stale})
    result = cli(tmp_path, monkeypatch, standin_base, output_tag)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert lines[-3] == (
        "compose-spec: error: 2 problems in 2 file(s): the diffs do not apply to the base image:"
    )
    assert lines[-2].startswith("  diff stale.diff: vllm/config/methods.py: hunk 1/1 @@ -3,5 +3,6 @@")
    assert lines[-1].startswith(
        "  diff stale.diff: vllm/__init__.py: hunk 1/1 @@ -1,1 +1,1 @@ does not match"
    )
    assert no_image(docker_client, output_tag) and no_helpers_left(docker_client)
