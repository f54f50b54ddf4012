"""`init` and `config`: a stack for the user's model (or the reference stack to edit), and the
resolved stack with where each value came from."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from composer.cli.base import Context, command
from composer.cli.output import echo_json, note
from composer.cli.params import complete_from_stack, json_option
from composer.errors import UsageError


def _facts(model_dir: Path):
    """What the model's config.json says (nothing when it has none yet)."""
    from composer.errors import CheckpointError
    from composer.probes.checkpoints import model_summary, read_config
    from composer.stack.new_stack import ModelFacts

    try:
        architecture, layers, max_len = model_summary(read_config(model_dir))
    except CheckpointError as err:
        note(f"{err}: the stack has no MTP variant and max_model_len 8192 (edit them when you know)")
        return ModelFacts()
    return ModelFacts(architecture, layers, max_len)


def interactive() -> bool:
    """True when init may ask (stdin is a terminal)."""
    return sys.stdin.isatty()


def _identity(directory: Path, project: str | None, port: int | None, ask: bool) -> tuple[str, int]:
    """The project and port to write: the flags, else (asked on a terminal) the folder's
    name and the first free port from 8000."""
    from composer.stack import values
    from composer.stack.starter import folder_project, free_port

    chosen = project or folder_project(directory)
    if ask and not project:
        chosen = click.prompt("Compose project name (names its containers)", default=chosen)
    number = port or free_port()
    if ask and not port:
        number = click.prompt("Host port clients use", default=number, type=click.IntRange(1, 65535))
    try:
        values.parse_name(chosen)
    except ValueError as err:
        raise UsageError(f"--project {chosen}: expected {err}") from None
    return chosen, number


def _ask() -> dict[str, Any]:
    """The model's questions on a terminal; none answered when the user wants the reference stack."""
    answer = click.prompt(
        "Model folder on this host (empty: write the reference stack to edit)", default="", show_default=False
    )
    if not answer.strip():
        return {}
    model_dir = Path(answer.strip()).expanduser()
    served = click.prompt("Model name clients send", default=model_dir.name.lower() or "model")
    tp = click.prompt("GPUs per variant (tensor-parallel size)", default=1, type=click.IntRange(min=1))
    gpus = click.prompt(
        "GPU ids (e.g. 0,1), all, or none", default="all" if tp == 1 else ",".join(map(str, range(tp)))
    )
    return {"model_dir": model_dir, "served_name": served, "tp": tp, "gpus": gpus}


def _model_text(
    project: str,
    port: int,
    model_dir: Path,
    served_name: str | None = None,
    tp: int | None = None,
    gpus: str | None = None,
    image: str | None = None,
) -> str:
    from composer.stack.new_stack import DEFAULT_VLLM_IMAGE, NewStack, model_stack_text, schema_path
    from composer.stack.starter import schema_file

    model_dir = model_dir.expanduser().resolve()
    tp = tp or 1
    answers = NewStack(
        model_dir=str(model_dir),
        served_name=served_name or model_dir.name.lower() or "model",
        tensor_parallel_size=tp,
        gpus=gpus or ("all" if tp == 1 else ",".join(str(i) for i in range(tp))),
        image=image or DEFAULT_VLLM_IMAGE,
        project=project,
        port=port,
    ).validated()
    return model_stack_text(answers, _facts(model_dir), schema_path(schema_file()))


@command("init")
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--model-dir", type=click.Path(file_okay=False, path_type=Path), help="Your model's folder on this host."
)
@click.option(
    "--served-name", metavar="NAME", help="The model name clients send [default: the folder's name]."
)
@click.option(
    "--tp", type=click.IntRange(min=1), help="GPUs per variant (tensor-parallel size) [default: 1]."
)
@click.option("--gpus", metavar="LIST", help="GPU ids such as 0,1, all, or none [default: all, or 0..TP-1].")
@click.option("--image", metavar="REF", help="The vLLM image [default: vllm/vllm-openai:v0.33.0].")
@click.option(
    "--project", metavar="NAME", help="The compose project name [default: the folder's name, sanitised]."
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    help="The host port clients use [default: the first free from 8000].",
)
@click.option("--env", "with_env", is_flag=True, help="Also write .env with a generated API key (mode 0600).")
@click.option("--force", is_flag=True, help="Overwrite existing starter files (never .env).")
def init_cmd(
    directory: Path, with_env: bool, force: bool, project: str | None, port: int | None, **model: Any
) -> None:
    """Write composer.toml and .env.example into DIRECTORY (default: here).

    With --model-dir (and --served-name, --tp, --gpus) the stack is for your model: its
    config.json decides whether an mtp variant is added (MTP layers) and max_model_len.
    Without them, init asks on a terminal; otherwise it writes the reference stack with
    `# CHANGE:` on each line to adapt. The stack names its compose project (--project,
    default the folder's name) and its port (--port, default the first free one from
    8000), so two stacks on one host never replace each other's containers.

    \b
    Examples:
      compose-spec init my-stack --model-dir /models/Qwen3-8B --served-name qwen3 --env
      compose-spec init --model-dir ~/models/llama --tp 2 --gpus 0,1 --project llama --port 8100
      compose-spec init --force
    """
    from composer.render.outputs import shown_path
    from composer.stack.starter import init_stack

    model = {k: v for k, v in model.items() if v is not None}
    if model and "model_dir" not in model:
        raise UsageError(
            "--served-name, --tp, --gpus and --image describe a model: give its folder with --model-dir"
        )
    ask = interactive()
    if not model and ask:
        model = _ask()
    if "model_dir" in model and not model["model_dir"].expanduser().is_dir():
        raise UsageError(
            f"--model-dir {model['model_dir']}: no such folder on this host "
            "(give the folder that holds the model's config.json and weights)"
        )
    project, port = _identity(directory, project, port, ask)
    text = _model_text(project, port, **model) if model else None
    written_files = init_stack(
        directory, with_env=with_env, force=force, stack_text=text, identity=(project, port)
    )
    for written in written_files:
        click.echo(f"wrote: {shown_path(written.path)}")
    click.echo(f"the stack's compose project: {project}, its port: {port}")
    if text is None:
        click.echo(
            "next: edit the lines of composer.toml marked CHANGE, and .env, then `compose-spec doctor`"
        )
    else:
        click.echo("next: `compose-spec doctor`, then `compose-spec up baseline`")


@command("config")
@click.argument("variant", required=False, shell_complete=complete_from_stack("variant"))
@json_option()
@click.option(
    "--keys", is_flag=True, help="List every settable key, its kind and what it does; read no stack."
)
@click.option("--schema", is_flag=True, help="Print the JSON Schema of composer.toml; read no stack.")
@click.pass_obj
def config_cmd(obj: Context, variant: str | None, as_json: bool, keys: bool, schema: bool) -> None:
    """Print every setting of the resolved stack: its value as written, where it came from
    and what it does (API key masked).

    Every key of every table is listed ([stack], [gateway], [kubernetes], [images], each
    variant), defaults included; sizes and durations keep their units (7.0GiB, 15m).

    \b
    Examples:
      compose-spec config
      compose-spec config dflash2 --json --env-file .env.demo
      compose-spec config --keys
      compose-spec config --schema > schema/composer.schema.json
    """
    from composer.render.describe import format_keys, format_stack, stack_data

    if schema:
        from composer.stack.schema import json_schema

        echo_json(json_schema())
        return
    if keys:
        from composer.stack.settings import KEYS

        if as_json:
            echo_json(
                [
                    {
                        "key": k.dotted,
                        "kind": k.kind,
                        "choices": list(k.choices),
                        "description": k.description,
                    }
                    for k in KEYS
                ]
            )
        else:
            click.echo(format_keys())
        return

    data = stack_data(obj.stack(), variant)
    if as_json:
        echo_json(data)
    else:
        click.echo(format_stack(data))
