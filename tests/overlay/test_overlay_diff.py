"""Diff validation without Docker: every refusal names the diff and the path."""

from __future__ import annotations

import pytest

from composer.errors import ImageBuildError
from composer.overlay.diff import check_pin, parse_diff, sha256_hex

from .diffs import ADD_DFLASH, one_file


def parse(text: str, skip: tuple[str, ...] = ()):
    return parse_diff("x.diff", text.encode(), "vllm", skip)


def test_valid_diff_lists_changes_and_sha() -> None:
    diff = parse(ADD_DFLASH)
    assert [c.path for c in diff.changes] == ["vllm/config/methods.py", "vllm/spec/dflash.py"]
    assert [c.is_new for c in diff.changes] == [False, True]
    assert diff.sha256 == sha256_hex(ADD_DFLASH.encode())


@pytest.mark.parametrize("path", ["csrc/attention/kernel.cu", "vllm/ops/gemm.cpp", "vllm/ops/x.cuh"])
def test_compiled_sources_are_refused(path: str) -> None:
    with pytest.raises(ImageBuildError, match=r"C/C\+\+/CUDA source; the overlay cannot compile") as err:
        parse(one_file(path))
    assert path in str(err.value)


def test_compiled_source_is_refused_even_when_skipped() -> None:
    with pytest.raises(ImageBuildError, match="cannot compile"):
        parse(one_file("csrc/kernel.cu"), skip=("csrc/*",))


def test_dotdot_is_refused() -> None:
    with pytest.raises(ImageBuildError, match=r"path 'vllm/\.\./\.\./etc/x\.py' contains '\.\.'"):
        parse(one_file("vllm/../../etc/x.py"))


def test_absolute_path_is_refused() -> None:
    text = "--- /usr/lib/python3/vllm/x.py\n+++ /usr/lib/python3/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(ImageBuildError, match=r"absolute path ./usr/lib/python3/vllm/x\.py."):
        parse(text)


def test_binary_patch_is_refused() -> None:
    text = (
        "diff --git a/vllm/w.py b/vllm/w.py\nnew file mode 100644\nindex 0000000..e69de29\n"
        "GIT binary patch\nliteral 3\nKcmZ?wa|Hka0Ra$-\n\nliteral 0\nHcmV?d00001\n\n"
    )
    with pytest.raises(ImageBuildError, match="binary patches are not allowed"):
        parse(text)


def test_binary_files_differ_is_refused() -> None:
    text = "diff --git a/vllm/a.py b/vllm/a.py\nBinary files a/vllm/a.py and b/vllm/a.py differ\n"
    with pytest.raises(ImageBuildError, match="binary patches"):
        parse(text)


def test_symlink_is_refused() -> None:
    text = (
        "diff --git a/vllm/link.py b/vllm/link.py\nnew file mode 120000\n--- /dev/null\n"
        "+++ b/vllm/link.py\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"
    )
    with pytest.raises(ImageBuildError, match=r"symlinks \(git mode 120000\)"):
        parse(text)


def test_non_python_file_in_package_is_refused() -> None:
    with pytest.raises(ImageBuildError, match=r"vllm/data/table.json: only Python files \(.py, .pyi\)"):
        parse(one_file("vllm/data/table.json"))


def test_path_outside_package_is_refused_unless_skipped() -> None:
    with pytest.raises(ImageBuildError, match="outside the package vllm/; add it to the recipe's skip"):
        parse(one_file("tests/test_dflash.py") + ADD_DFLASH)
    diff = parse(one_file("tests/test_dflash.py") + ADD_DFLASH, skip=("tests/*",))
    assert diff.skipped == ("tests/test_dflash.py",)
    assert len(diff.changes) == 2


def test_rename_and_delete_are_refused() -> None:
    rename = (
        "diff --git a/vllm/a.py b/vllm/b.py\nsimilarity index 100%\n"
        "rename from vllm/a.py\nrename to vllm/b.py\n"
    )
    with pytest.raises(ImageBuildError, match="renames are not supported"):
        parse(rename + ADD_DFLASH)
    delete = (
        "diff --git a/vllm/a.py b/vllm/a.py\ndeleted file mode 100644\n--- a/vllm/a.py\n"
        "+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"
    )
    with pytest.raises(ImageBuildError, match="cannot delete files"):
        parse(delete)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "contains no file changes"),
        ("just some text\n", "contains no file changes"),
        (one_file("vllm/a.py", body="@@ -1,3 +1,3 @@\n-a\n+b\n"), "does not parse as a unified diff"),
    ],
)
def test_unusable_text_is_refused(text: str, message: str) -> None:
    with pytest.raises(ImageBuildError, match=message):
        parse(text)


def test_non_utf8_is_refused() -> None:
    with pytest.raises(ImageBuildError, match="not UTF-8"):
        parse_diff("x.diff", b"\xff\xfe--- a\n", "vllm")


def test_pin_mismatch_and_missing_pin() -> None:
    diff = parse(ADD_DFLASH)
    check_pin(diff, diff.sha256, "re-pin")
    with pytest.raises(
        ImageBuildError, match=r"diff x.diff changed: sha256 is [0-9a-f]{64}, the recipe pins 0+"
    ):
        check_pin(diff, "0" * 64, "run `compose-spec build r --pin`")
    with pytest.raises(ImageBuildError, match="is not pinned"):
        check_pin(diff, "", "run `compose-spec build r --pin`")
