"""Facts read from checkpoint directories: config.json fields and weight sizes.

Weights are sized from safetensors headers only (an 8-byte little-endian length, then JSON
with each tensor's data offsets): a few kilobytes read per shard.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from composer.errors import CheckpointError

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
MAX_HEADER_BYTES = 100 * (1 << 20)
MTP_LAYER_KEYS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")


def read_config(model_dir: str | Path) -> dict:
    """The parsed config.json of a checkpoint directory."""
    path = Path(model_dir) / CONFIG_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} does not exist") from None
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path} is not readable JSON: {err}") from err
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not a JSON object")
    return data


def positive_int(value: object) -> int | None:
    """`value` when it is a positive integer (a bool is not one), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _field(config: dict, key: str) -> object:
    """A field at the top level or in `text_config` (multimodal wrappers)."""
    if key in config:
        return config[key]
    text_config = config.get("text_config")
    return text_config.get(key) if isinstance(text_config, dict) else None


DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1, "fp8": 1}


def kv_bytes_per_token(config: dict) -> int | None:
    """KV cache bytes of one token over the whole model (all GPUs): 2 (K, V) x attention layers
    (a hybrid's full-attention ones) x KV heads x head size x dtype bytes; None when unknown."""
    layers, heads = _field(config, "num_hidden_layers"), _field(config, "num_key_value_heads")
    head_dim = _field(config, "head_dim")
    if head_dim is None:
        hidden, attention_heads = _field(config, "hidden_size"), _field(config, "num_attention_heads")
        if isinstance(hidden, int) and isinstance(attention_heads, int) and attention_heads > 0:
            head_dim = hidden // attention_heads
    layers, heads, head_dim = (positive_int(x) for x in (layers, heads, head_dim))
    if not (layers and heads and head_dim):
        return None
    types = _field(config, "layer_types")
    interval = _field(config, "full_attention_interval")
    if isinstance(types, list) and types:
        layers = sum(1 for t in types if t == "full_attention") or layers
    elif isinstance(interval, int) and interval > 0:
        layers //= interval
    dtype = _field(config, "torch_dtype") or _field(config, "dtype") or "bfloat16"
    return 2 * layers * heads * head_dim * DTYPE_BYTES.get(str(dtype), 2)


def mtp_layers(config: dict) -> int:
    """The number of MTP layers (`mtp_num_hidden_layers`, top level or text_config); 0 if none."""
    return next((n for key in MTP_LAYER_KEYS if (n := positive_int(_field(config, key)))), 0)


def dflash_block_size(config: dict) -> int | None:
    """`dflash_config.block_size` of a DFlash draft checkpoint, or None when absent."""
    dflash = _field(config, "dflash_config")
    if not isinstance(dflash, dict):
        return None
    size = dflash.get("block_size")
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def has_dflash_config(config: dict) -> bool:
    return isinstance(_field(config, "dflash_config"), dict)


def read_safetensors_header(path: str | Path) -> dict:
    """The JSON header of one .safetensors file."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) != 8:
                raise CheckpointError(f"{path} is too short to be a safetensors file")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise CheckpointError(f"{path}: header length {length} is implausible")
            raw = handle.read(length)
    except OSError as err:
        raise CheckpointError(f"{path} is not readable: {err}") from err
    if len(raw) != length:
        raise CheckpointError(f"{path}: header is truncated")
    try:
        header = json.loads(raw)
    except ValueError as err:
        raise CheckpointError(f"{path}: header is not JSON: {err}") from err
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: header is not a JSON object")
    return header


def tensor_bytes(header: dict) -> int:
    """Bytes of every tensor a header lists: the span of its data offsets."""
    total = 0
    for name, entry in header.items():
        if name != "__metadata__" and isinstance(entry, dict):
            start, end = entry.get("data_offsets", (0, 0))
            total += int(end) - int(start)
    return total


def shard_files(model_dir: str | Path) -> list[Path]:
    """The safetensors shards of a checkpoint: from the index when present, else every *.safetensors."""
    model_dir = Path(model_dir)
    index = model_dir / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        except (OSError, ValueError, AttributeError) as err:
            raise CheckpointError(f"{index} is not readable JSON: {err}") from err
        return [model_dir / name for name in sorted(set(weight_map.values()))]
    return sorted(model_dir.glob("*.safetensors"))


def weights_bytes(model_dir: str | Path) -> int | None:
    """Total weight bytes of a checkpoint, or None when it has no safetensors files."""
    shards = shard_files(model_dir)
    if not shards:
        return None
    return sum(tensor_bytes(read_safetensors_header(shard)) for shard in shards)


def model_summary(config: dict) -> tuple[str | None, int, int | None]:
    """(architecture, MTP layers, max_position_embeddings) of a config.json, as far as it says."""
    architectures = _field(config, "architectures")
    architecture = architectures[0] if isinstance(architectures, list) and architectures else None
    max_len = positive_int(_field(config, "max_position_embeddings"))
    return (str(architecture) if architecture else None), mtp_layers(config), max_len
