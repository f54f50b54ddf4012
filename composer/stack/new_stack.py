"""The stack `compose-spec init` writes: one for the user's own model (baseline, plus mtp
when its config.json has MTP layers), or the reference stack with each line to change marked.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from composer.errors import UsageError
from composer.stack import values as v

DEFAULT_VLLM_IMAGE = "vllm/vllm-openai:v0.33.0"
DEFAULT_MAX_MODEL_LEN = 8192
MAX_K = 7  # K=7 was the measured peak for MTP (design notes); vLLM needs a multiple of the layers above them


@dataclass(frozen=True)
class ModelFacts:
    """What the model's config.json says (all optional: a folder may have none yet)."""

    architecture: str | None = None
    mtp_layers: int = 0
    max_position_embeddings: int | None = None


@dataclass(frozen=True)
class NewStack:
    """The user's answers: where the model is, the name clients send, TP and the GPUs."""

    model_dir: str
    served_name: str
    tensor_parallel_size: int = 1
    gpus: str = "all"
    image: str = DEFAULT_VLLM_IMAGE
    project: str = "vllm"
    port: int = 8000

    def validated(self) -> NewStack:
        """The same answers, refused (UsageError, naming the option) when a value is invalid."""
        checks = (
            ("--model-dir", v.parse_host_path, self.model_dir),
            ("--served-name", v.parse_served_name, self.served_name),
            ("--tp", v.parse_positive_int, self.tensor_parallel_size),
            ("--gpus", v.parse_gpus, self.gpus),
            ("--project", v.parse_name, self.project),
            ("--port", v.parse_port, self.port),
        )
        for option, parse, raw in checks:
            try:
                parse(raw)
            except ValueError as err:
                raise UsageError(f"{option} {raw!s}: expected {err}") from None
        gpus = v.parse_gpus(self.gpus)
        if gpus not in (None, ("all",)) and len(gpus) < self.tensor_parallel_size:
            raise UsageError(
                f"--gpus {self.gpus} lists {len(gpus)} GPU(s) but --tp {self.tensor_parallel_size} needs "
                f"{self.tensor_parallel_size}: list as many GPUs as the tensor-parallel size"
            )
        return self


def mtp_k(layers: int) -> int:
    """The K to start from for a model with `layers` MTP layers (vLLM: a multiple above them)."""
    if layers <= 1:
        return MAX_K
    return max(layers, (MAX_K // layers) * layers)


def _q(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def model_stack_text(answers: NewStack, facts: ModelFacts, schema_ref: str | None = None) -> str:
    """composer.toml for the user's model: baseline, plus mtp when the model has MTP layers."""
    name = posixpath.basename(answers.model_dir.rstrip("/")) or "model"
    container_name = re.sub(r"[^A-Za-z0-9._-]", "-", name)
    described = facts.architecture or "an unknown architecture (no config.json read)"
    max_len = min(facts.max_position_embeddings or DEFAULT_MAX_MODEL_LEN, 131072)
    lines = [f"#:schema {schema_ref}"] if schema_ref else []
    lines += [
        f"# Written by `compose-spec init` for {answers.model_dir}: {described}, "
        f"{facts.mtp_layers} MTP layer(s).",
        "# `compose-spec config` lists every key with its value and what it does; .env overrides them.",
        "",
        "[stack]",
        f"project = {_q(answers.project)}   # COMPOSE_PROJECT_NAME: names its containers and volumes",
        f"served_model_name = {_q(answers.served_name)}",
        f"port = {answers.port}   # VLLM_PORT: the host port clients use",
        f"tensor_parallel_size = {answers.tensor_parallel_size}",
        f'gpus = {_q(answers.gpus)}   # GPU_DEVICES: a device list, "all", or "none"',
        f"max_model_len = {max_len}   # from max_position_embeddings; lower it to save KV cache",
        f"model_dir = {_q(answers.model_dir)}",
        f"model_path = {_q('/models/' + container_name)}",
        "",
        "[images]",
        f"vllm = {_q(answers.image)}   # VLLM_IMAGE: a vLLM image that runs "
        f"{facts.architecture or 'the model'}",
        "",
        "[variants.baseline]",
        'description = "plain decode: long prompts and reference output"',
    ]
    if facts.mtp_layers:
        lines += [
            "",
            "[variants.mtp]",
            f'description = "MTP speculative decoding ({facts.mtp_layers} MTP layer(s) in the checkpoint)"',
            'extends = "baseline"',
            "",
            "[variants.mtp.speculative]",
            'method = "mtp"',
            f"num_speculative_tokens = {mtp_k(facts.mtp_layers)}  # try: compose-spec bench --k 1,3,7",
        ]
    lines += [
        "",
        "[workloads]",
        f'chat-1 = "{"mtp" if facts.mtp_layers else "baseline"}"  # prompts up to 512 tokens, one stream',
        'long-16 = "baseline"  # prompts over 4096 tokens, 16 streams',
    ]
    return "\n".join(lines) + "\n"


CHANGE_HINTS = {
    "served_model_name": "the model name your clients send",
    "tensor_parallel_size": "GPUs per variant",
    "max_model_len": "at most the model's max_position_embeddings",
    "gpus": "your GPU ids",
    "model_dir": "your model's folder",
    "model_path": "/models/<your model>",
    "draft_dir": "your draft model's folder (dflash2 only)",
    "draft_path": "/models/<your draft>",
    "vllm": "your vLLM image",
    "dflash2": "your overlay image (compose-spec build dflash2)",
}
_KEY_LINE = re.compile(r"^(?P<key>[a-z_0-9]+)\s*=")
_VALUE = re.compile(r'^[a-z_0-9]+\s*=\s*(?:"(?:[^"\\]|\\.)*"|[^#\s]+)')


def reference_stack_text(text: str, schema_ref: str | None = None) -> str:
    """The reference stack with `# CHANGE: ...` on each line a user must adapt."""
    out = []
    for line in text.splitlines():
        if line.startswith("#:schema"):
            if schema_ref:
                out.append(f"#:schema {schema_ref}")
            continue
        match = _KEY_LINE.match(line)
        hint = CHANGE_HINTS.get(match.group("key")) if match else None
        if hint:
            value = _VALUE.match(line)
            line = f"{value.group(0) if value else line}  # CHANGE: {hint}"
        out.append(line)
    if schema_ref and not text.startswith("#:schema"):
        out.insert(0, f"#:schema {schema_ref}")
    return "\n".join(out) + "\n"


_IDENTITY_LINE = re.compile(r'^(?P<key>project|port)(?P<eq>\s*=\s*)(?:"[^"]*"|\d+)', re.MULTILINE)


def with_identity(text: str, project: str, port: int) -> str:
    """The stack text with its `[stack]` table's `project` and `port` set (comments kept)."""
    values = {"project": _q(project), "port": str(port)}

    def swap(match: re.Match[str]) -> str:
        return f"{match.group('key')}{match.group('eq')}{values[match.group('key')]}"

    stack_start = text.find("[stack]")
    if stack_start < 0:
        return text
    end = text.find("\n[", stack_start + 1)
    end = len(text) if end < 0 else end
    return text[:stack_start] + _IDENTITY_LINE.sub(swap, text[stack_start:end]) + text[end:]


def schema_path(shipped: Path) -> str:
    """The `#:schema` reference of a stack written outside the checkout: the shipped file's path."""
    return shipped.resolve().as_uri()
