"""The `follow` compose profile without Docker: its rendered service (socket, host paths, no
key), the lock folder both sides honour, and the inputs `up --with follow` refuses."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from composer.errors import PreflightFailed
from composer.render import render_variant, resolve_target
from composer.stack.load import load_stack
from composer.swap.lock import lock_dir
from composer.swap.outcome import UpOptions
from composer.swap.profiles import check_follow_inputs
from tests.conftest import REPO


def _follow_service(stack) -> dict:
    files = render_variant(resolve_target(stack, "mtp"), Path("/out"))
    document = yaml.safe_load(next(f for f in files if f.path.suffix == ".yml").content)
    return document["services"]["follow"]


def test_the_follow_service_is_opt_in_with_the_socket_and_host_paths(tmp_path: Path) -> None:
    empty_env_file = tmp_path / "empty.env"
    empty_env_file.write_text("", "utf-8")
    stack = load_stack([REPO / "composer.toml"], empty_env_file, environ={})
    follow = _follow_service(stack)
    assert follow["profiles"] == ["follow"] and follow["restart"] == "unless-stopped"
    assert follow["network_mode"] == "host"
    assert follow["command"] == ["--env-file", "${FOLLOW_ENV_FILE:-.env}", "follow"]
    assert follow["working_dir"] == "${FOLLOW_PROJECT_DIR:-${PWD}}"
    binds = {v["source"]: v for v in follow["volumes"]}
    assert binds["/var/run/docker.sock"]["target"] == "/var/run/docker.sock"
    for source, volume in binds.items():  # every host folder at the host's own path
        assert volume["target"] == source
    lock = follow["environment"]["VLLM_COMPOSER_LOCK_DIR"]
    assert lock in binds and binds[lock]["bind"]["create_host_path"] is False
    model = binds[f"${{MODEL_DIR:-{stack.model_dir}}}"]
    assert model["read_only"] is True
    assert follow["environment"]["COMPOSE_PROJECT_NAME"] == stack.project
    assert "VLLM_API_KEY" not in str(follow)  # the key only through the mounted env file


def test_the_committed_files_carry_no_host_path_of_the_checkout() -> None:
    text = (REPO / "compose" / "mtp.yml").read_text("utf-8")
    assert str(REPO) not in text and "follow" in text


def test_the_lock_folder_moves_only_to_an_absolute_path(monkeypatch, tmp_path: Path) -> None:
    default = lock_dir()
    monkeypatch.setenv("VLLM_COMPOSER_LOCK_DIR", str(tmp_path / "locks"))
    assert lock_dir() == tmp_path / "locks"
    monkeypatch.setenv("VLLM_COMPOSER_LOCK_DIR", "relative/locks")
    assert lock_dir() == default


def _ctx(tmp_path: Path, **options) -> SimpleNamespace:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "composer.toml").write_text("", "utf-8")
    (project / ".env").write_text("", "utf-8")
    stack = SimpleNamespace(home=project, sources={})
    base = UpOptions(
        profiles=("follow",), env_file=str(project / ".env"), stack_files=(str(project / "composer.toml"),)
    )
    return SimpleNamespace(stack=stack, options=replace(base, **options))


def test_inputs_in_the_project_folder_pass(tmp_path: Path) -> None:
    check_follow_inputs(_ctx(tmp_path))


def test_an_env_file_outside_the_project_folder_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.env"
    outside.write_text("", "utf-8")
    with pytest.raises(PreflightFailed, match=r"env file .* must be a file in the project folder"):
        check_follow_inputs(_ctx(tmp_path, env_file=str(outside)))


def test_a_stack_file_outside_the_project_folder_is_refused(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    extra = tmp_path / "extra.toml"
    extra.write_text("", "utf-8")
    ctx.options = replace(ctx.options, stack_files=(*ctx.options.stack_files, str(extra)))
    with pytest.raises(PreflightFailed, match=r"stack file .*extra\.toml"):
        check_follow_inputs(ctx)


def test_set_values_are_refused(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    ctx.stack.sources = {"stack.max_model_len": "flag --set", "stack.project": "flag -p"}
    with pytest.raises(PreflightFailed, match=r"without --set \(stack.max_model_len\)"):
        check_follow_inputs(ctx)
