"""The README and the documentation site (docs/, mkdocs.yml) stay true to the code: every
`compose-spec` command and option they name exists in the CLI, every repository path they
name exists, the configuration reference covers every settings table, and the site builds
with `mkdocs build --strict`."""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from tests.conftest import REPO, in_ci

DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))
TEXTS = [REPO / "README.md", *PAGES]
SEPARATORS = {"|", "||", "&&", ";", ">", ">>", "2>&1", "<", "&", ")", "\\"}
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^(?:\./)?[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*/?$")
TOP_FILES = {
    "composer.toml",
    "Makefile",
    "mkdocs.yml",
    "pyproject.toml",
    ".env.example",
    ".env.demo",
    ".env.cpu",
}


def _cli() -> click.Group:
    """The command tree, from `composer.cli.main` (a module or a package)."""
    from composer.cli import main

    return main


def _code(text: str) -> list[str]:
    """Lines of fenced code blocks and inline code spans."""
    blocks = [line for block in FENCE.findall(text) for line in block.splitlines()]
    prose = FENCE.sub("", text)
    return blocks + INLINE.findall(prose)


def _invocations(text: str) -> list[list[str]]:
    """The words after each `compose-spec` in code, up to a shell separator or comment."""
    found = []
    for line in _code(text):
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = line.split()
        for i, word in enumerate(words):
            if word.endswith("compose-spec") and not word.startswith(("_", "$")) and "=" not in word:
                rest = []
                for token in words[i + 1 :]:
                    if token in SEPARATORS or token.startswith("#"):
                        break
                    rest.append(token.rstrip("`"))
                    if token.endswith("`"):  # the end of an inline code span
                        break
                found.append(rest)
    return found


def _placeholder(word: str) -> bool:
    return word.isupper() or word in {"...", "COMMAND"} or "<" in word


def _option(command: click.Command, name: str) -> click.Parameter | None:
    for param in command.params:
        if name in (*param.opts, *param.secondary_opts):
            return param
    return None


def _problems(words: list[str]) -> list[str]:
    """What in one invocation the CLI does not know."""
    main = _cli()
    current: click.Command = main
    ctx = click.Context(main)
    problems, i = [], 0
    while i < len(words):
        word = words[i]
        if word.startswith("-") and word != "-":
            name = word.split("=", 1)[0]
            if name in {"--help", "-h"}:
                i += 1
                continue
            param = _option(current, name) or _option(main, name)
            if param is None:
                problems.append(f"{current.name}: no option {name}")
            elif (
                isinstance(param, click.Option) and not param.is_flag and not param.count and "=" not in word
            ):
                i += 1  # the option's value
            i += 1
            continue
        if isinstance(current, click.Group):
            if _placeholder(word):
                break
            sub = current.get_command(ctx, word)
            if sub is None:
                problems.append(f"no command {word!r}")
                break
            current = sub
        i += 1
    return problems


def test_every_command_and_option_named_exists() -> None:
    problems, seen = [], 0
    for path in TEXTS:
        for words in _invocations(path.read_text(encoding="utf-8")):
            seen += 1
            problems += [
                f"{path.relative_to(REPO)}: compose-spec {' '.join(words)}: {p}" for p in _problems(words)
            ]
    assert seen > 100, seen
    assert problems == []


def test_the_check_finds_a_misnamed_command_and_option() -> None:
    assert _problems(["--env-file", ".env", "up", "mtp", "--timeout", "600", "--json"]) == []
    assert _problems(["up", "mtp", "--wait-forever"]) == ["up: no option --wait-forever"]
    assert _problems(["upp", "mtp"]) == ["no command 'upp'"]


def _paths(text: str) -> set[str]:
    named = set(re.findall(r"\]\(([^)#\s]+)", text))  # link targets
    for line in _code(text):
        named.update(word.strip(".,:;()") for word in line.split())
    found = set()
    for word in named:
        if "://" in word or not PATH.match(word) or any(part.isupper() for part in word.split("/")):
            continue
        word = word.removeprefix("./")
        first = word.split("/")[0]
        if (
            "/" in word and (REPO / first).exists() and first not in {".venv", ".composer", "build"}
        ) or word in TOP_FILES:
            found.add(word)
    return found


def test_every_repository_path_named_exists() -> None:
    missing, seen = [], 0
    for path in TEXTS:
        base = path.parent
        for name in _paths(path.read_text(encoding="utf-8")):
            seen += 1
            on_page = path != REPO / "README.md" and (base / name).exists()  # a link from a docs page
            if not ((REPO / name).exists() or on_page):
                missing.append(f"{path.relative_to(REPO)}: {name}")
    assert seen > 30, seen
    assert missing == []


def test_the_readme_is_a_quick_start() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    for needed in ("pipx install", "uv tool install", "make demo", "make test", "compose-spec init"):
        assert needed in readme, needed
    assert "make test" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def _hook():
    spec = importlib.util.spec_from_file_location(
        "settings_reference", DOCS / "hooks" / "settings_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_reference_covers_every_settings_table() -> None:
    from composer.stack.gateway import GATEWAY_SETTINGS
    from composer.stack.kubernetes import KUBE_SETTINGS
    from composer.stack.load import STACK_SETTINGS

    hook = _hook()
    page = (DOCS / "reference.md").read_text(encoding="utf-8")
    assert hook.MARKER in page
    rendered = hook.on_page_markdown(page)
    keys = [f"stack.{s.key}" for s in STACK_SETTINGS]
    keys += [f"gateway.{s[0]}" for s in GATEWAY_SETTINGS] + [f"kubernetes.{s[0]}" for s in KUBE_SETTINGS]
    for key in keys:
        assert f"| {hook.key_cell(key)} |" in rendered, key
    assert "`GATEWAY_HOLD_TIMEOUT`" in rendered and "`KUBE_NAMESPACE`" in rendered
    assert hook.MARKER not in rendered


def test_the_reference_says_what_a_key_does_and_writes_defaults_as_a_stack_does() -> None:
    hook = _hook()
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in hook.render_reference().splitlines()}

    def row(key: str) -> list[str]:
        return [cell.strip() for cell in rows[hook.key_cell(key)].strip("|").split(" | ")]

    assert row("stack.port")[1:] == ["host port clients use (1-65535)", "`8000`", "`VLLM_PORT`"]
    assert row("gateway.hold_timeout")[2] == "`15m` (`stack.start_period`)"  # the effective default
    assert row("stack.stop_grace_period")[2] == "`30s`" and row("gateway.policy_window")[2] == "`30s`"
    assert row("kubernetes.shm_size")[2] == "`8 GiB`" and row("gateway.max_head_bytes")[2] == "`64 KiB`"
    assert row("kubernetes.tolerations")[2] == (
        '`[{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]`'
    )
    assert row("gateway.policy")[1].endswith("(one of: manual, auto)")
    assert "white-space: nowrap" in hook.key_cell("stack.allow_sleep_level_2_with_speculation")
    assert hook.key_cell("variants.<name>.gpus") == (
        '<code style="white-space: nowrap">variants.&lt;name&gt;.gpus</code>'
    )
    assert hook.duration_text(90) == "1m30s" and hook.size_text("1.3G") == "1.3 GiB"


def test_the_site_builds_strict(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if mkdocs is None:
        if in_ci():
            pytest.fail("mkdocs is not installed: make install installs the docs extra")
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "index.html").read_text(encoding="utf-8").count("<tr>") > 40
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is not None:  # laid out as a 1400 px wide window shows it
        assert _laid_out(chromium, tmp_path / "site" / "commands") == ("0", "")
        assert _laid_out(chromium, tmp_path / "site" / "reference") == ("0", "")


PROBE = """<script>window.addEventListener('load', () => {
  const over = [...document.querySelectorAll('pre > code, table')].filter(e => e.scrollWidth > e.clientWidth + 1);
  const names = [...document.querySelectorAll('td:last-child code')].filter(e => e.getClientRects().length > 1);
  document.body.dataset.over = over.length;
  document.body.dataset.broken = names.map(e => e.textContent).join(',');
});</script></body>"""


def _laid_out(chromium: str, page: Path) -> tuple[str, str]:
    """How many code blocks and tables of `page` scroll sideways at 1400 px, and the names in
    its tables' variable column that break across lines (headless Chromium)."""
    probe = page / "probe.html"
    probe.write_text((page / "index.html").read_text(encoding="utf-8").replace("</body>", PROBE))
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,900", "--dump-dom"]
    done = subprocess.run(
        [chromium, *args, "--virtual-time-budget=3000", probe.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    over = re.search(r'data-over="([^"]*)"', done.stdout)
    broken = re.search(r'data-broken="([^"]*)"', done.stdout)
    assert over is not None and broken is not None, done.stderr[-2000:]
    return over.group(1), broken.group(1)
