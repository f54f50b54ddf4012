"""Small diffs and package trees shared by the overlay tests."""

from __future__ import annotations

METHODS_PY = '''"""Methods."""

METHODS = (
    "ngram",
    "eagle",
    "mtp",
)
'''

INIT_PY = '"""A stand-in package."""\n'

ADD_DFLASH = """diff --git a/vllm/config/methods.py b/vllm/config/methods.py
--- a/vllm/config/methods.py
+++ b/vllm/config/methods.py
@@ -3,5 +3,6 @@
 METHODS = (
     "ngram",
     "eagle",
+    "dflash",
     "mtp",
 )
diff --git a/vllm/spec/dflash.py b/vllm/spec/dflash.py
new file mode 100644
--- /dev/null
+++ b/vllm/spec/dflash.py
@@ -0,0 +1,2 @@
+\"\"\"DFlash.\"\"\"
+BLOCK = 8
"""


def one_file(path: str, header: str = "", body: str = "@@ -1 +1 @@\n-a\n+b\n") -> str:
    """A git diff changing one file; `header` lines go after the `diff --git` line."""
    return f"diff --git a/{path} b/{path}\n{header}--- a/{path}\n+++ b/{path}\n{body}"
