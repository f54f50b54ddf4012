"""Checkpoint facts from real files: config.json fields and safetensors header sizes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from composer.errors import CheckpointError
from composer.probes import checkpoints as ckpt
from tests.doctor.fakes import write_checkpoint, write_safetensors


def test_tensor_bytes_sums_the_data_offsets_of_every_tensor(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    written = write_safetensors(
        path, {"embed": ("BF16", [1000, 64]), "norm": ("F32", [64]), "q": ("I8", [3, 5])}
    )
    header = ckpt.read_safetensors_header(path)
    assert ckpt.tensor_bytes(header) == written == 1000 * 64 * 2 + 64 * 4 + 15


def test_tensor_bytes_needs_no_known_dtype() -> None:
    header = {"x": {"dtype": "F6_E3M2", "shape": [10], "data_offsets": [100, 108]}}
    assert ckpt.tensor_bytes(header) == 8


def test_weights_bytes_sums_every_shard_of_the_index(tmp_path: Path) -> None:
    total = write_checkpoint(tmp_path / "m", {"model_type": "x"}, shards=[4096, 2048, 1024], indexed=True)
    assert total == 7168
    assert ckpt.weights_bytes(tmp_path / "m") == 7168
    assert len(ckpt.shard_files(tmp_path / "m")) == 3


def test_weights_bytes_without_index_globs_shards_and_none_without_weights(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "a", {}, shards=[100, 200])
    assert ckpt.weights_bytes(tmp_path / "a") == 300
    write_checkpoint(tmp_path / "b", {})
    assert ckpt.weights_bytes(tmp_path / "b") is None


@pytest.mark.parametrize(
    "raw",
    [b"\x01\x02", struct.pack("<Q", 500) + b"{}", struct.pack("<Q", 2) + b"[]", struct.pack("<Q", 1 << 40)],
)
def test_bad_safetensors_headers_raise_checkpoint_error(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(raw)
    with pytest.raises(CheckpointError):
        ckpt.read_safetensors_header(path)


def test_config_fields_top_level_and_text_config(tmp_path: Path) -> None:
    assert ckpt.mtp_layers({"text_config": {"mtp_num_hidden_layers": 1}}) == 1
    assert ckpt.mtp_layers({"mtp_num_hidden_layers": 3}) == 3
    assert ckpt.mtp_layers({"num_nextn_predict_layers": 1}) == 1
    assert ckpt.mtp_layers({"model_type": "llama"}) == 0
    assert ckpt.dflash_block_size({"dflash_config": {"block_size": 8}}) == 8
    assert ckpt.dflash_block_size({"dflash_config": {}}) is None
    assert ckpt.dflash_block_size({}) is None


def test_read_config_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        ckpt.read_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not readable JSON"):
        ckpt.read_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps([1]))
    with pytest.raises(CheckpointError, match="not a JSON object"):
        ckpt.read_config(tmp_path)
