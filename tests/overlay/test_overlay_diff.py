"""Diff validation without Docker: every refusal names the diff and the path."""

from __future__ import annotations

import re

import pytest

from composer.errors import ImageBuildError
from composer.overlay.diff import added_modules, check_pin, parse_diff, sha256_hex

from .diffs import ADD_DFLASH, one_file


def parse(text: str, skip: tuple[str, ...] = (), strip: int | None = None):
    return parse_diff("x.diff", text.encode(), "vllm", skip, strip)


def test_valid_diff_lists_changes_and_sha() -> None:
    diff = parse(ADD_DFLASH)
    assert [c.path for c in diff.changes] == ["vllm/config/methods.py", "vllm/spec/dflash.py"]
    assert [c.is_new for c in diff.changes] == [False, True]
    assert diff.sha256 == sha256_hex(ADD_DFLASH.encode())


@pytest.mark.parametrize(
    "path", ["vllm/ops/gemm.cpp", "vllm/ops/x.cuh", "vllm/csrc/k.cu", "vllm/a.c", "vllm/b.cc", "vllm/c.h"]
)
def test_native_sources_inside_the_package_are_refused(path: str) -> None:
    with pytest.raises(
        ImageBuildError, match=r"native source \(C/C\+\+/CUDA/Cython\); the overlay cannot"
    ) as err:
        parse(one_file(path))
    assert path in str(err.value)


def test_native_source_outside_the_package_is_refused_unless_skipped() -> None:
    with pytest.raises(ImageBuildError, match=r"csrc/kernel\.cu: outside the package vllm/"):
        parse(one_file("csrc/kernel.cu") + ADD_DFLASH)
    assert parse(one_file("csrc/kernel.cu") + ADD_DFLASH, skip=("csrc/*",)).skipped == ("csrc/kernel.cu",)


DOCS_BINARY = (
    "diff --git a/docs/figure.png b/docs/figure.png\nnew file mode 100644\nindex 0000000..e69de29\n"
    "GIT binary patch\nliteral 3\nKcmZ?wa|Hka0Ra$-\n\nliteral 0\nHcmV?d00001\n\n"
)
DOCS_SYMLINK = (
    "diff --git a/docs/latest b/docs/latest\nnew file mode 120000\n--- /dev/null\n"
    "+++ b/docs/latest\n@@ -0,0 +1 @@\n+v1\n\\ No newline at end of file\n"
)


def test_skip_listed_paths_are_skipped_whatever_their_type() -> None:
    """Regression: a binary (or native, or symlink) file under a skipped folder was refused."""
    text = DOCS_BINARY + DOCS_SYMLINK + one_file("csrc/kernel.cu") + ADD_DFLASH
    diff = parse(text, skip=("docs/*", "csrc/*"))
    assert diff.skipped == ("docs/figure.png", "docs/latest", "csrc/kernel.cu")
    assert [c.path for c in diff.changes] == ["vllm/config/methods.py", "vllm/spec/dflash.py"]


@pytest.mark.parametrize("path", ["vllm/data/table.json", "vllm/configs/model.yaml", "vllm/tokens.txt"])
def test_data_files_inside_the_package_are_applied_like_python_files(path: str) -> None:
    """Regression: data files could only be skipped, which dropped them from the image."""
    diff = parse(one_file(path) + ADD_DFLASH)
    assert path in [c.path for c in diff.changes]


def test_dotdot_is_refused() -> None:
    with pytest.raises(ImageBuildError, match=r"path 'vllm/\.\./\.\./etc/x\.py' contains '\.\.'"):
        parse(one_file("vllm/../../etc/x.py"))


def test_absolute_path_is_refused() -> None:
    text = "--- /usr/lib/python3/vllm/x.py\n+++ /usr/lib/python3/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(ImageBuildError, match=r"absolute path ./usr/lib/python3/vllm/x\.py."):
        parse(text)


def test_binary_patch_inside_the_package_is_refused() -> None:
    text = DOCS_BINARY.replace("docs/figure.png", "vllm/w.bin")
    with pytest.raises(ImageBuildError, match=r"vllm/w\.bin: a binary file inside vllm/"):
        parse(text)


def test_binary_files_differ_is_refused() -> None:
    text = "diff --git a/vllm/a.py b/vllm/a.py\nBinary files a/vllm/a.py and b/vllm/a.py differ\n"
    with pytest.raises(ImageBuildError, match="a binary file inside vllm/"):
        parse(text)


def test_symlink_is_refused() -> None:
    text = (
        "diff --git a/vllm/link.py b/vllm/link.py\nnew file mode 120000\n--- /dev/null\n"
        "+++ b/vllm/link.py\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"
    )
    with pytest.raises(ImageBuildError, match=r"symlinks \(git mode 120000\)"):
        parse(text)


def test_path_outside_package_is_refused_unless_skipped() -> None:
    with pytest.raises(
        ImageBuildError, match=r"outside the package vllm/; .* add the path to the recipe's skip"
    ):
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


def test_every_problem_of_every_file_is_reported_at_once() -> None:
    """Regression: only the first offending file was named; each fix needed another run."""
    text = one_file("tests/t.py") + one_file("vllm/k.cu") + ADD_DFLASH + one_file("vllm/../x.py")
    with pytest.raises(ImageBuildError) as err:
        parse(text)
    lines = str(err.value).splitlines()
    assert lines[0] == "3 problems in diff x.diff:"
    assert [line.split(": ")[1] for line in lines[1:]] == ["tests/t.py", "vllm/k.cu", "vllm/../x.py"]


PACKAGE_RELATIVE = """diff --git a/config/methods.py b/config/methods.py
--- a/config/methods.py
+++ b/config/methods.py
@@ -1 +1 @@
-a
+b
diff --git a/tests/test_methods.py b/tests/test_methods.py
--- a/tests/test_methods.py
+++ b/tests/test_methods.py
@@ -1 +1 @@
-a
+b
"""


def test_a_package_relative_backport_applies_with_a_strip_level() -> None:
    """Regression: `a/config/x.py` (relative to the package) was refused with only a skip hint."""
    with pytest.raises(ImageBuildError, match=r"set strip = 1 in its \[\[diffs\]\] table \(like `patch -p1`"):
        parse(PACKAGE_RELATIVE)
    diff = parse(PACKAGE_RELATIVE, strip=1)
    assert [c.path for c in diff.changes] == ["vllm/config/methods.py", "vllm/tests/test_methods.py"]
    skipped = parse(PACKAGE_RELATIVE, skip=("tests/*",), strip=1)  # globs match either form
    assert skipped.skipped == ("vllm/tests/test_methods.py",)
    assert parse(PACKAGE_RELATIVE, skip=("vllm/tests/*",), strip=1).skipped == skipped.skipped
    monorepo = re.sub(r"\b([ab])/", r"\1/python/vllm/", PACKAGE_RELATIVE)  # a/python/vllm/config/...
    assert [c.path for c in parse(monorepo, strip=3).changes] == [c.path for c in diff.changes]
    with pytest.raises(ImageBuildError, match="strip = 4 leaves nothing of the path"):
        parse(PACKAGE_RELATIVE, strip=4)


def test_added_modules_are_the_new_python_files() -> None:
    text = ADD_DFLASH + (
        "diff --git a/vllm/v2/__init__.py b/vllm/v2/__init__.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/vllm/v2/__init__.py\n@@ -0,0 +1 @@\n+X = 1\n"
        "diff --git a/vllm/v2/data.json b/vllm/v2/data.json\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/vllm/v2/data.json\n@@ -0,0 +1 @@\n+{}\n"
        "diff --git a/vllm/v2/not-a-module.py b/vllm/v2/not-a-module.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/vllm/v2/not-a-module.py\n@@ -0,0 +1 @@\n+X = 1\n"
    )
    assert added_modules([parse(text)]) == ["vllm.spec.dflash", "vllm.v2"]
