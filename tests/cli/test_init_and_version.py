"""`init` writes a stack for the user's model (or the marked reference stack); `version`
names the tool's version and the images the stack would use."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from composer.cli import main
from composer.stack.load import compose_project_name, load_stack
from composer.stack.new_stack import mtp_k
from composer.stack.schema import json_schema

from .conftest import REPO, invoke


def _model(tmp_path: Path, config: dict | None) -> Path:
    folder = tmp_path / "Qwen3-Next"
    folder.mkdir()
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def _load(stack_dir: Path):
    (stack_dir / "empty.env").write_text("")
    return load_stack([stack_dir / "composer.toml"], stack_dir / "empty.env", environ={})


def test_init_for_a_model_with_mtp_layers(tmp_path: Path) -> None:
    config = {
        "architectures": ["Qwen3NextForCausalLM"],
        "mtp_num_hidden_layers": 1,
        "max_position_embeddings": 32768,
    }
    model = _model(tmp_path, config)
    args = [
        "init",
        str(tmp_path / "s"),
        "--model-dir",
        str(model),
        "--served-name",
        "qwen",
        "--tp",
        "2",
        "--gpus",
        "2,3",
    ]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    stack = _load(tmp_path / "s")
    assert sorted(stack.variants) == ["baseline", "mtp"]
    assert stack.variants["mtp"].speculative.num_speculative_tokens == 7
    assert (stack.served_model_name, stack.tensor_parallel_size, stack.gpus) == ("qwen", 2, ("2", "3"))
    assert stack.model_dir == str(model.resolve()) and stack.max_model_len == 32768
    assert stack.workloads == {"chat-1": "mtp", "long-16": "baseline"}
    text = (tmp_path / "s" / "composer.toml").read_text()
    assert "Qwen3NextForCausalLM" in text and "HuggingFaceCache" not in text
    assert not list(jsonschema.Draft202012Validator(json_schema()).iter_errors(tomllib.loads(text)))
    schema_ref = text.splitlines()[0].removeprefix("#:schema file://")
    assert Path(schema_ref).is_file()


def test_init_without_mtp_layers_or_config(tmp_path: Path) -> None:
    model = _model(tmp_path, None)
    result = invoke("init", str(tmp_path / "s"), "--model-dir", str(model))
    assert result.exit_code == 0, result.output
    assert "config.json does not exist" in result.stderr
    stack = _load(tmp_path / "s")
    assert list(stack.variants) == ["baseline"] and stack.served_model_name == "qwen3-next"
    assert (stack.tensor_parallel_size, stack.gpus) == (1, ("all",))


@pytest.mark.parametrize("layers", [1, 2, 3, 4, 8])
def test_mtp_k_is_a_multiple_of_the_layers_above_them(layers: int) -> None:
    k = mtp_k(layers)
    assert k >= 1 and (k <= layers or k % layers == 0)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--gpus", "0", "--tp", "2"], "--gpus 0 lists 1 GPU(s) but --tp 2 needs 2"),
        (["--served-name", "-x"], "--served-name -x: expected"),
        (["--gpus", "zero"], "--gpus zero: expected a GPU list"),
    ],
)
def test_init_refuses_bad_answers(tmp_path: Path, extra: list[str], message: str) -> None:
    model = _model(tmp_path, {})
    result = invoke("init", str(tmp_path / "s"), "--model-dir", str(model), *extra)
    assert result.exit_code == 2 and message in result.stderr
    assert not (tmp_path / "s").exists()


def test_model_options_need_the_model_dir(tmp_path: Path) -> None:
    result = invoke("init", str(tmp_path / "s"), "--tp", "2")
    assert result.exit_code == 2 and "give its folder with --model-dir" in result.stderr


def test_the_reference_stack_marks_each_line_to_change(tmp_path: Path) -> None:
    result = invoke("init", str(tmp_path))
    assert result.exit_code == 0 and "marked CHANGE" in result.stdout
    text = (tmp_path / "composer.toml").read_text()
    marked = [line.split("=")[0].strip() for line in text.splitlines() if "# CHANGE:" in line]
    assert {"served_model_name", "model_dir", "gpus", "tensor_parallel_size", "vllm"} <= set(marked)
    same = tomllib.loads((REPO / "composer.toml").read_text())
    written = tomllib.loads(text)
    assert written["stack"].pop("project") == compose_project_name(tmp_path.name)
    assert isinstance(written["stack"].pop("port"), int)
    del same["stack"]["project"], same["stack"]["port"]
    assert written == same  # only comments, the project and the port differ


def test_init_names_the_project_after_the_folder_on_a_free_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("composer.stack.starter.free_port", lambda: 8123)
    said = invoke("init", str(tmp_path / "Team.Chat"))
    assert said.exit_code == 0 and "the stack's compose project: teamchat, its port: 8123" in said.stdout
    stack = _load(tmp_path / "Team.Chat")
    assert (stack.project, stack.port) == ("teamchat", 8123)
    result = invoke("init", str(tmp_path / "m"), "--model-dir", str(_model(tmp_path, {})), "--port", "9001")
    assert result.exit_code == 0, result.output
    assert (_load(tmp_path / "m").project, _load(tmp_path / "m").port) == ("m", 9001)
    result = invoke("init", str(tmp_path / "f"), "--project", "mine", "--port", "9002")
    assert (_load(tmp_path / "f").project, _load(tmp_path / "f").port) == ("mine", 9002)


def test_init_asks_for_the_project_and_port_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("composer.cli.init.interactive", lambda: True)
    monkeypatch.setattr("composer.stack.starter.free_port", lambda: 8124)
    answers = "\n\n9100\n"  # the reference stack, the folder's name, port 9100
    result = CliRunner().invoke(main, ["init", str(tmp_path / "Asked")], input=answers)
    assert result.exit_code == 0, result.output
    assert "[asked]" in result.output and "[8124]" in result.output  # the proposed defaults
    assert (_load(tmp_path / "Asked").project, _load(tmp_path / "Asked").port) == ("asked", 9100)


def test_init_refuses_a_folder_with_no_project_name(tmp_path: Path) -> None:
    result = invoke("init", str(tmp_path / "__"))
    assert result.exit_code == 2 and "pass --project NAME" in result.stderr
    assert not (tmp_path / "__").exists()
    assert invoke("init", str(tmp_path / "x"), "--project", "Bad").exit_code == 2


def test_version_without_an_engine(empty_env_file: Path, no_docker: None) -> None:
    result = invoke("version", "--json", "--env-file", str(empty_env_file))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["compose_spec"] and data["engine_error"]
    roles = {(i["role"], i["ref"]): i["present"] for i in data["images"]}
    assert roles == {
        ("gateway", "vllm-composer-gateway:0.1.0"): None,
        ("vllm", "vllm-openai:qwen38-verified"): None,
        ("vllm", "vllm-openai:qwen38-dflash2"): None,
    }


@pytest.mark.docker
def test_version_says_which_images_are_here(empty_env_file: Path) -> None:
    args = ["version", "--env-file", str(empty_env_file), "--set", "images.vllm=vllm-sim:latest"]
    result = invoke(*args, "--set", "images.dflash2=vllm-composer.test/absent:none")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("compose-spec ")
    assert any(line.startswith("vllm image vllm-sim:latest: present [") for line in lines)
    assert (
        "vllm image vllm-composer.test/absent:none: not present (variants: dflash2, dflash2-adaptive)"
        in lines
    )
    assert "absent:none is not here" in result.stderr


def test_init_asks_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(tmp_path, {"architectures": ["LlamaForCausalLM"]})
    monkeypatch.setattr("composer.cli.init.interactive", lambda: True)
    answers = f"{model}\nllama\n2\n0,1\n\n\n"  # the folder's name and a free port as proposed
    result = CliRunner().invoke(main, ["init", str(tmp_path / "s")], input=answers)
    assert result.exit_code == 0, result.output
    stack = _load(tmp_path / "s")
    assert (stack.served_model_name, stack.tensor_parallel_size, stack.gpus) == ("llama", 2, ("0", "1"))
    assert list(stack.variants) == ["baseline"]
    empty = CliRunner().invoke(main, ["init", str(tmp_path / "r")], input="\n\n\n")
    assert empty.exit_code == 0 and "# CHANGE:" in (tmp_path / "r" / "composer.toml").read_text()
