"""Test doubles and builders for doctor tests: a GPU probe fake and real checkpoint files."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path

from composer.probes.gpu import GpuInfo, GpuProcess
from composer.stack.load import load_stack
from composer.stack.model import Stack

REPO = Path(__file__).resolve().parents[2]
GIB = 1 << 30


class FakeProbe:
    """A GpuProbe answering with fixed GPUs (or none)."""

    name = "fake"

    def __init__(self, gpus: Sequence[GpuInfo] = (), reason: str = "") -> None:
        self._gpus = list(gpus)
        self.available = bool(gpus) or not reason
        self.reason = reason

    def gpus(self) -> list[GpuInfo]:
        return list(self._gpus)


def rtx4090(index: int, used_gib: float = 0.5, processes: Sequence[GpuProcess] = ()) -> GpuInfo:
    """An Ada RTX 4090 (SM 8.9, 24 GiB) with `used_gib` in use."""
    total, used = 24 * GIB, int(used_gib * GIB)
    return GpuInfo(index, "NVIDIA GeForce RTX 4090", (8, 9), total, used, total - used, tuple(processes))


def h100(index: int) -> GpuInfo:
    """A Hopper H100 (SM 9.0, 80 GiB), idle."""
    return GpuInfo(index, "NVIDIA H100 80GB HBM3", (9, 0), 80 * GIB, GIB // 2, 80 * GIB - GIB // 2)


def write_safetensors(path: Path, tensors: Mapping[str, tuple[str, list[int]]]) -> int:
    """Write a safetensors header (8-byte LE length + JSON) with empty data; return tensor bytes."""
    sizes = {"BF16": 2, "F16": 2, "F32": 4, "I8": 1}
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = sizes[dtype]
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    return offset


def write_checkpoint(
    directory: Path, config: Mapping[str, object], shards: Sequence[int] = (), indexed: bool = False
) -> int:
    """A checkpoint dir: config.json and one BF16 shard per entry of `shards` (bytes each)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    total, weight_map = 0, {}
    for i, size in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" if indexed else f"model{i}.safetensors"
        total += write_safetensors(directory / name, {f"layer{i}.weight": ("BF16", [size // 2])})
        weight_map[f"layer{i}.weight"] = name
    if indexed:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    return total


TARGET_CONFIG = {"model_type": "qwen3_5", "text_config": {"mtp_num_hidden_layers": 1}}
DRAFT_CONFIG = {"model_type": "qwen3", "dflash_config": {"block_size": 8}}


def make_stack(
    tmp_path: Path,
    toml: str = "",
    environ: Mapping[str, str] | None = None,
    target: Mapping[str, object] | None = TARGET_CONFIG,
    draft: Mapping[str, object] | None = DRAFT_CONFIG,
    target_shards: Sequence[int] = (),
    draft_shards: Sequence[int] = (),
) -> Stack:
    """The repo's composer.toml (+ `toml` merged over it) on checkpoints built under tmp_path."""
    model_dir, draft_dir = tmp_path / "target", tmp_path / "draft"
    if target is not None:
        write_checkpoint(model_dir, target, target_shards, indexed=len(target_shards) > 1)
    if draft is not None:
        write_checkpoint(draft_dir, draft, draft_shards)
    files = [REPO / "composer.toml"]
    if toml:
        extra = tmp_path / "extra.toml"
        extra.write_text(toml, encoding="utf-8")
        files.append(extra)
    env = {
        "MODEL_DIR": str(model_dir),
        "DRAFT_DIR": str(draft_dir),
        "VLLM_API_KEY": "a-long-random-test-key-0123456789",
        "VLLM_PORT": str(free_port()),
        **(environ or {}),
    }
    return load_stack(files, env_file=None, environ=env)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def facts(stack, name: str):
    """A variant's facts as doctor's checks read them (`composer.doctor.report.variant_facts`)."""
    from composer.doctor.report import variant_facts
    from composer.render.target import resolve_target

    return variant_facts(resolve_target(stack, name))
