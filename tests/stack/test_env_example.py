""".env.example documents every variable the stack reads, with the real defaults."""

from __future__ import annotations

import re
from pathlib import Path

from composer.render.files import render_all
from composer.render.target import resolve_target
from composer.stack import load as config
from composer.stack.gateway import GATEWAY_SETTINGS
from composer.stack.kubernetes import KUBE_SETTINGS
from composer.stack.load import load_stack
from composer.stack.model import Stack, image_env_var
from tests.conftest import REPO

EXAMPLE = REPO / ".env.example"
_ASSIGNMENT = re.compile(r"^(#\s?)?([A-Z_][A-Z0-9_]*)=(.*)$", re.MULTILINE)


def variables_read(stack: Stack) -> set[str]:
    """Every variable compose-spec or a rendered file reads."""
    names = {s.env for s in config.STACK_SETTINGS if s.env}
    names |= set(config.VARIANT_ENV.values()) | {config.API_KEY_VAR, config.STACK_FILES_VAR}
    names |= {image_env_var(key) for key in stack.images}
    names |= {env for _, env, _, _ in GATEWAY_SETTINGS + KUBE_SETTINGS if env}
    for variant in stack.variants:
        spec = resolve_target(stack, variant).spec
        names |= {var.name for var in spec.variables()} | set(spec.secret_env)
    return names


def test_every_variable_read_is_documented(default_stack: Stack) -> None:
    documented = {m.group(2) for m in _ASSIGNMENT.finditer(EXAMPLE.read_text())}
    missing = variables_read(default_stack) - documented
    assert not missing, f".env.example does not document {sorted(missing)}"
    assert documented <= variables_read(default_stack), "documents a variable nothing reads"


def test_the_commented_values_are_the_defaults(tmp_path: Path) -> None:
    """Uncommenting every example line renders exactly the committed files."""
    lines = [f"{m.group(2)}={m.group(3)}" for m in _ASSIGNMENT.finditer(EXAMPLE.read_text())]
    env_file = tmp_path / "uncommented.env"
    env_file.write_text("\n".join(lines) + "\n")
    stack = load_stack(None, env_file, environ={})
    assert stack.api_key is None, "the example must not ship a key"
    for file in render_all(stack, [], REPO / "compose"):
        assert file.content.encode() == file.path.read_bytes(), file.path


def test_the_example_is_a_valid_env_file(tmp_path: Path) -> None:
    copy = tmp_path / ".env"
    copy.write_text(EXAMPLE.read_text())
    assert load_stack(None, copy, environ={}).port == 8000
