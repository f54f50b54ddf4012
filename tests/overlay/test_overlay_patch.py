"""Applying diffs in memory without Docker: exact hunks, offsets, new files, failures."""

from __future__ import annotations

import difflib

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from composer.errors import ImageBuildError
from composer.overlay.diff import parse_diff
from composer.overlay.patch import applies_in_reverse, apply_diffs

from .diffs import ADD_DFLASH, METHODS_PY, one_file


def parse(text: str, name: str = "x.diff"):
    return parse_diff(name, text.encode(), "vllm")


def test_edits_and_adds_files() -> None:
    out = apply_diffs(
        {"vllm/config/methods.py": METHODS_PY, "vllm/spec/dflash.py": None}, [parse(ADD_DFLASH)]
    )
    assert '    "eagle",\n    "dflash",\n    "mtp",\n' in out["vllm/config/methods.py"]
    assert out["vllm/spec/dflash.py"] == '"""DFlash."""\nBLOCK = 8\n'


def test_hunk_moved_by_an_offset_still_applies() -> None:
    moved = "# a header line\n# another\n" + METHODS_PY
    out = apply_diffs({"vllm/config/methods.py": moved, "vllm/spec/dflash.py": None}, [parse(ADD_DFLASH)])
    assert out["vllm/config/methods.py"].startswith("# a header line\n")
    assert '"dflash",' in out["vllm/config/methods.py"]


def test_failed_hunk_names_diff_file_and_hunk() -> None:
    changed = METHODS_PY.replace('"eagle"', '"eagle3"')
    with pytest.raises(ImageBuildError) as err:
        apply_diffs({"vllm/config/methods.py": changed, "vllm/spec/dflash.py": None}, [parse(ADD_DFLASH)])
    assert str(err.value) == (
        "diff x.diff: vllm/config/methods.py: hunk 1/1 @@ -3,5 +3,6 @@ does not match the base image's file"
    )


def test_already_applied_change_is_pointed_out() -> None:
    first = apply_diffs(
        {"vllm/config/methods.py": METHODS_PY, "vllm/spec/dflash.py": None}, [parse(ADD_DFLASH)]
    )
    with pytest.raises(ImageBuildError, match="looks applied already"):
        apply_diffs(
            {"vllm/config/methods.py": first["vllm/config/methods.py"], "vllm/spec/dflash.py": None},
            [parse(ADD_DFLASH)],
        )


def test_new_file_that_exists_and_edit_of_missing_file() -> None:
    with pytest.raises(ImageBuildError, match="adds this file but the base image already has it"):
        apply_diffs({"vllm/config/methods.py": METHODS_PY, "vllm/spec/dflash.py": "x\n"}, [parse(ADD_DFLASH)])
    with pytest.raises(ImageBuildError, match="edits this file but the base image does not have it"):
        apply_diffs({"vllm/config/methods.py": None, "vllm/spec/dflash.py": None}, [parse(ADD_DFLASH)])


def test_no_newline_at_end_of_file() -> None:
    body = "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
    out = apply_diffs({"vllm/a.py": "a\nb"}, [parse(one_file("vllm/a.py", body=body))])
    assert out == {"vllm/a.py": "a\nc"}


def test_several_hunks_and_diffs_in_order() -> None:
    original = "".join(f"line{i}\n" for i in range(1, 21))
    first = one_file(
        "vllm/a.py",
        body=(
            "@@ -2,3 +2,3 @@\n line2\n-line3\n+LINE3\n line4\n"
            "@@ -17,3 +17,4 @@\n line17\n line18\n+new\n line19\n"
        ),
    )
    second = one_file("vllm/a.py", body="@@ -2,3 +2,3 @@\n line2\n-LINE3\n+third\n line4\n")
    out = apply_diffs({"vllm/a.py": original}, [parse(first, "1.diff"), parse(second, "2.diff")])
    lines = out["vllm/a.py"].splitlines()
    assert lines[2] == "third" and lines[18] == "new" and len(lines) == 21


def test_second_diff_failure_names_that_diff() -> None:
    original = "a\nb\n"
    second = one_file("vllm/a.py", body="@@ -1,2 +1,2 @@\n a\n-zzz\n+c\n")
    with pytest.raises(ImageBuildError, match=r"^diff 2.diff: vllm/a.py: hunk 1/1"):
        apply_diffs(
            {"vllm/a.py": original},
            [parse(one_file("vllm/a.py", body="@@ -1 +1 @@\n-a\n+A\n"), "1.diff"), parse(second, "2.diff")],
        )


LINES = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "def f():\n", "    pass\n", "\n"]), max_size=30)


@settings(max_examples=150, deadline=None)
@given(before=LINES, after=LINES, context=st.integers(min_value=0, max_value=3))
def test_any_difflib_diff_round_trips(before: list[str], after: list[str], context: int) -> None:
    """A diff made by difflib, parsed by unidiff and applied here, gives the new text."""
    text = "".join(difflib.unified_diff(before, after, "a/vllm/m.py", "b/vllm/m.py", n=context))
    assume(text)
    out = apply_diffs({"vllm/m.py": "".join(before)}, [parse(text)])
    assert out["vllm/m.py"] == "".join(after)


def test_every_failing_file_and_hunk_is_reported_in_one_run() -> None:
    """Regression: only the first failing hunk was named; a far-away base needed one run per file."""
    original = "".join(f"line{i}\n" for i in range(1, 21))
    three_hunks = one_file(
        "vllm/a.py",
        body=(
            "@@ -2,3 +2,3 @@\n line2\n-line3\n+LINE3\n line4\n"
            "@@ -9,3 +9,3 @@\n line9\n-zzz\n+ZZZ\n line11\n"
            "@@ -17,3 +17,3 @@\n line17\n-yyy\n+YYY\n line19\n"
        ),
    )
    other = one_file("vllm/b.py", body="@@ -1 +1 @@\n-old\n+new\n")
    with pytest.raises(ImageBuildError) as err:
        apply_diffs(
            {
                "vllm/a.py": original,
                "vllm/b.py": "changed\n",
                "vllm/config/methods.py": None,
                "vllm/spec/dflash.py": "x\n",
            },
            [parse(three_hunks, "1.diff"), parse(other + ADD_DFLASH, "2.diff")],
        )
    lines = str(err.value).splitlines()
    assert lines[0] == "5 problems in 4 file(s): the diffs do not apply to the base image:"
    assert [line.strip().split(" @@")[0] for line in lines[1:]] == [
        "diff 1.diff: vllm/a.py: hunk 2/3",
        "diff 1.diff: vllm/a.py: hunk 3/3",
        "diff 2.diff: vllm/b.py: hunk 1/1",
        "diff 2.diff: vllm/config/methods.py: the diff edits this file but the base image does not have it",
        "diff 2.diff: vllm/spec/dflash.py: the diff adds this file but the base image already has it",
    ]


def test_a_base_that_holds_the_change_is_recognised_by_the_reverse_diff() -> None:
    base = {"vllm/config/methods.py": METHODS_PY, "vllm/spec/dflash.py": None}
    patched = apply_diffs(base, [parse(ADD_DFLASH)])
    assert not applies_in_reverse(base, [parse(ADD_DFLASH)])
    assert applies_in_reverse(patched, [parse(ADD_DFLASH)])
    moved = {path: "# a newer release\n" + text for path, text in patched.items()}
    assert applies_in_reverse(moved, [parse(ADD_DFLASH)])
    half = {**patched, "vllm/spec/dflash.py": None}  # one file of the change missing
    assert not applies_in_reverse(half, [parse(ADD_DFLASH)])
