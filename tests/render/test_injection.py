"""Arbitrary text in every free-text value renders to a compose file that means exactly
that text and a launcher that passes it to `docker run` as exactly that argument."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from composer.errors import RenderError
from composer.render.files import UNHOLDABLE_IN_DEFAULT, render_variant
from composer.render.spec import Var
from composer.render.target import resolve_target
from composer.stack.load import load_stack
from composer.stack.model import Stack
from tests.conftest import examples

from .conftest import REPO
from .helpers import (
    clean_environ,
    comparable,
    container_from_compose,
    container_from_run_argv,
    container_from_spec,
    interpolate_tree,
    run_launcher,
)

API_KEY = "sk-key with spaces $(id) 'q'"
free_text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=24)
# Names YAML 1.1 reads as booleans, nulls or numbers unless quoted: on, Y, null, 123.
env_names = st.one_of(
    st.sampled_from(["ON", "on", "Y", "n", "NULL", "null", "True", "OFF", "_"]),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
).filter(lambda n: n != "VLLM_API_KEY")
names = st.one_of(
    st.sampled_from(["on", "y", "null", "123", "1e3", "no"]),
    st.from_regex(r"[a-z0-9][a-z0-9_-]{0,8}", fullmatch=True),
)
extra_keys = st.text(max_size=8).filter(
    lambda k: k not in {"method", "num_speculative_tokens", "attention_backend", "model"}
)
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@st.composite
def odd_stacks(draw: st.DrawFn, base: Stack) -> tuple[Stack, str]:
    """`base` with free text drawn for every value a user can write freely."""
    variant_name = draw(st.sampled_from(sorted(base.variants)))
    variant = base.variants[variant_name]
    speculative = variant.speculative
    if speculative is not None:
        extra = draw(st.dictionaries(extra_keys, free_text, max_size=2))
        speculative = replace(speculative, extra=tuple(sorted(extra.items())))
    variant = replace(
        variant,
        env=tuple(sorted(draw(st.dictionaries(env_names, free_text, max_size=3)).items())),
        extra_args=tuple(draw(st.lists(free_text, max_size=3))),
        description=draw(free_text),
        speculative=speculative,
    )
    stack = replace(
        base,
        project=draw(names),
        service=draw(names),
        served_model_name=draw(free_text),
        model_dir=draw(free_text),
        draft_dir=draw(free_text),
        model_path=draw(free_text),
        draft_path=draw(free_text),
        images={key: draw(free_text) for key in base.images},
        env=tuple(sorted(draw(st.dictionaries(env_names, free_text, max_size=2)).items())),
        variants={**base.variants, variant_name: variant},
    )
    return stack, variant_name


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("injection")


BASE = load_stack([REPO / "composer.toml"], None, environ={})
ENV = {"VLLM_API_KEY": API_KEY}


def existing_dir(root: Path, text: str) -> str:
    """A host directory named by free text (one path component under `root`), created:
    the launcher refuses a mount source that does not exist."""
    path = root / "mounts" / text.replace("/", "_")
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=odd_stacks(BASE))
def test_free_text_round_trips(case: tuple[Stack, str], stub_dir: Path, workdir: Path) -> None:
    env = ENV
    stack, variant = case
    stack = replace(
        stack,
        model_dir=existing_dir(workdir, stack.model_dir),
        draft_dir=existing_dir(workdir, stack.draft_dir),
    )
    target = resolve_target(stack, variant)
    spec = target.spec
    assert target.follow is not None  # the follow profile mounts every variant's model folders
    follow_vars = [p for t in target.follow.model_dirs for p in t if isinstance(p, Var)]
    variables = [*spec.variables(), *follow_vars]
    unholdable = [v for v in variables if any(c in v.default for c in UNHOLDABLE_IN_DEFAULT)]
    if unholdable:
        event("refused: a default compose cannot hold")
        with pytest.raises(RenderError, match=unholdable[0].name):
            render_variant(target, workdir)
        return
    event(f"rendered {variant}")
    compose_file, launcher = render_variant(target, workdir)
    intended = comparable(container_from_spec(spec, env))

    document = yaml.load(compose_file.content, Loader=Loader)
    assert {"name", "services"} <= set(document) <= {"name", "services", "configs", "volumes"}
    service = interpolate_tree(document["services"][stack.service], env)
    assert comparable(container_from_compose(service, unescape=False)) == intended

    launcher.path.write_text(launcher.content)
    syntax = subprocess.run(["bash", "-n", str(launcher.path)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    shape = container_from_run_argv(run_launcher(launcher.path, stub_dir, clean_environ(**env)), env)
    assert comparable(shape) == intended
    assert shape["name"] == spec.container_name

    args: list[str] = shape["command"]  # type: ignore[assignment]
    assert args[0] == stack.model_path
    # args[0] is the model path, free text too: look for the flags after it
    served_at = args.index("--served-model-name", 1) + 1
    assert args[served_at] == stack.served_model_name
    extra = len(stack.variant(variant).extra_args)
    assert args[len(args) - extra :] == list(stack.variant(variant).extra_args)
    # the flag itself, not free text equal to it (the served name or an extra argument)
    flags = [i for i in range(1, len(args) - extra) if args[i] == "--speculative-config" and i != served_at]
    if flags:
        config = json.loads(args[flags[0] + 1])
        speculative = stack.variant(variant).speculative
        assert speculative is not None
        assert {k: config[k] for k, _ in speculative.extra} == dict(speculative.extra)
        if speculative.draft_model:
            assert config["model"] == stack.draft_path
