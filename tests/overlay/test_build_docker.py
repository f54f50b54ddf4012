"""Overlay builds against the real Docker engine, with a stand-in base image.

Every refusal is checked through the CLI: exit code 1, one error line, no image created.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from composer import labels as label_names
from composer.cli import main
from composer.errors import ImageBuildError
from composer.overlay.builder import build_overlay
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

    started = time.monotonic()
    again = build_overlay(docker_client, recipe, extra_labels=LABELS)
    assert again.status == "current" and again.image_id == image.id
    assert time.monotonic() - started < 1.0

    forced = build_overlay(docker_client, recipe, force=True, extra_labels=LABELS)
    assert forced.status == "built" and forced.image_id != image.id
    assert no_image(docker_client, image.id)  # the replaced image is gone


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


def test_pin_then_build_through_the_cli(
    docker_client, standin_base, output_tag, tmp_path, monkeypatch
) -> None:
    path = write_recipe(tmp_path, {"dflash.diff": ADD_DFLASH}, pins={"dflash.diff": ""})
    refused = cli(tmp_path, monkeypatch, standin_base, output_tag)
    assert_refused(refused, "diff dflash.diff is not pinned", "compose-spec build r --pin")
    dry = cli(tmp_path, monkeypatch, standin_base, output_tag, "--pin", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert f'sha256 = "{sha256_hex(ADD_DFLASH.encode())}"' in path.read_text()
    assert "dry run passed, nothing built" in dry.output and no_image(docker_client, output_tag)


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
        (
            one_file("csrc/attention/paged.cu"),
            "csrc/attention/paged.cu: C/C++/CUDA source; the overlay cannot compile",
        ),
        (one_file("vllm/_C/ops.cpp"), "vllm/_C/ops.cpp: C/C++/CUDA source; the overlay cannot compile"),
        (one_file("vllm/../../../etc/evil.py"), "contains '..'"),
        (ABSOLUTE, "absolute path '/opt/site/vllm/a.py' is not allowed"),
        (BINARY, "binary patches are not allowed"),
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
