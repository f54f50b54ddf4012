"""Generate tiny deterministic checkpoints that the CPU vLLM image can serve.

Runs inside the vllm-cpu image (it has torch, transformers and tokenizers), with no
network and no model hub:

    docker run --rm --network none --entrypoint python3 \
        -v "$PWD/images/vllm-cpu/make_models.py:/gen/make_models.py:ro" -v "$OUT:/out" \
        vllm-cpu:0.32.0 /gen/make_models.py /out

Writes one directory per model under the output directory:

- `qwen3-tiny`: Qwen3, 2 layers, hidden size 256, head_dim 64, random weights, with a
  512-token byte-level BPE tokenizer trained here on a generated corpus;
- `qwen3-tiny-draft`: the same model cut to its first layer (same tokenizer and
  vocabulary), a draft for vLLM's `draft_model` speculative method; the target's last
  layer is scaled down so that the draft agrees with it often but not always (about 3
  greedy tokens in 4), like a trained draft;
- `qwen3-tiny-hd16`: like `qwen3-tiny` with head_dim 16, which vLLM's CPU attention
  rejects only when the first request runs (startup and /health succeed);
- `mimo-tiny-mtp` (with `--mtp`): a MiMo model (Qwen2 layers, `MiMoForCausalLM`) with one
  MTP layer, served by vLLM's `mtp` method on CPU (K=1: vLLM's MiMo MTP predicts one token);
- `qwen3_5-tiny-mtp` (with `--mtp`): a Qwen3.5 text model (full attention only) with
  one MTP layer; vLLM cannot inspect it without torchvision, which the image leaves out.

The same seed gives byte-identical files. Each directory carries `composer-model.json`
(the recipe and the sha256 of every file); a run whose recipe matches an existing
directory with intact files leaves it alone, so the script is idempotent.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

MANIFEST = "composer-model.json"
GENERATOR_VERSION = 1
VOCAB_SIZE = 512
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['content'] is string %}{%- set content = message['content'] %}"
    "{%- else %}{%- set content = message['content'] | map(attribute='text') | join('') %}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
_WORD_TEXT = (
    "the model serves one port and one name in several variants baseline mtp draft "
    "speculative decoding tokens accepted per step cache memory swap gate health rollback "
    "stream request response prompt completion chat user assistant system hello world "
    "quick brown fox jumps over lazy dog alpha beta gamma delta one two three four five "
    "six seven eight nine ten def return import class self value key list dict print"
)
WORDS = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class Recipe:
    """What one generated model is: architecture sizes, seed and derivation."""

    name: str
    architecture: str
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    seed: int
    derived_from: str | None = None
    extra: dict = field(default_factory=dict)

    def digest(self) -> str:
        """A hash of the recipe and the generator and library versions that shape the bytes."""
        import tokenizers
        import torch
        import transformers

        data = {
            "recipe": asdict(self),
            "generator": GENERATOR_VERSION,
            "vocab": VOCAB_SIZE,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def recipes(seed: int, mtp: bool) -> list[Recipe]:
    """The models to generate, in dependency order."""
    base = {"architecture": "qwen3", "hidden_size": 256, "intermediate_size": 512, "seed": seed}
    result = [
        Recipe(
            "qwen3-tiny", layers=2, heads=4, kv_heads=2, head_dim=64, extra={"last_layer_scale": 0.1}, **base
        ),
        Recipe(
            "qwen3-tiny-draft", layers=1, heads=4, kv_heads=2, head_dim=64, derived_from="qwen3-tiny", **base
        ),
        Recipe("qwen3-tiny-hd16", layers=2, heads=16, kv_heads=4, head_dim=16, **base),
    ]
    if mtp:
        for name, architecture in (("mimo-tiny-mtp", "mimo"), ("qwen3_5-tiny-mtp", "qwen3_5")):
            result.append(
                Recipe(
                    name,
                    layers=2,
                    heads=4,
                    kv_heads=2,
                    head_dim=64,
                    extra={"mtp_layers": 1},
                    **{**base, "architecture": architecture},
                )
            )
    return result


def corpus(seed: int, lines: int = 4000) -> list[str]:
    """A generated training text: word sequences, numbers and a little code."""
    rng = random.Random(seed)
    text = []
    for i in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 16))]
        if i % 5 == 0:
            words.append(str(rng.randint(0, 10_000)))
        text.append(" ".join(words).capitalize() + rng.choice([".", "?", "!", ":"]))
    return text


def train_tokenizer(seed: int):
    """A byte-level BPE tokenizer of VOCAB_SIZE tokens, wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN, chat_template=CHAT_TEMPLATE
    )


def build_config(recipe: Recipe, tokenizer):
    """The transformers config of a recipe."""
    import torch

    common = {
        "vocab_size": VOCAB_SIZE,
        "hidden_size": recipe.hidden_size,
        "intermediate_size": recipe.intermediate_size,
        "num_hidden_layers": recipe.layers,
        "num_attention_heads": recipe.heads,
        "num_key_value_heads": recipe.kv_heads,
        "head_dim": recipe.head_dim,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "eos_token_id": tokenizer.convert_tokens_to_ids(EOS_TOKEN),
        "pad_token_id": tokenizer.convert_tokens_to_ids(PAD_TOKEN),
        "bos_token_id": None,
        # float32, served with `--dtype float32` (vLLM's auto dtype turns float32 into
        # bfloat16 on CPU): with bfloat16 its CPU attention uses AMX wherever the CPU
        # reports it, and where the kernel does not grant AMX state (seen on virtual
        # machines) the worker dies on the first request (SIGILL, exit code -4).
        "dtype": torch.float32,
    }
    if recipe.architecture == "qwen3":
        from transformers import Qwen3Config

        return Qwen3Config(**common)
    if recipe.architecture == "mimo":
        from transformers import Qwen2Config

        # MiMo is Qwen2 with MTP layers: vLLM picks MiMoForCausalLM from `architectures`
        # and its MTP model reads num_nextn_predict_layers (no remote code needed).
        return Qwen2Config(
            **{k: v for k, v in common.items() if k != "head_dim"},
            architectures=["MiMoForCausalLM"],
            num_nextn_predict_layers=recipe.extra.get("mtp_layers", 1),
        )
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(
        **common,
        layer_types=["full_attention"] * recipe.layers,
        mtp_num_hidden_layers=recipe.extra.get("mtp_layers", 1),
    )


def build_model(recipe: Recipe, tokenizer, outdir: Path):
    """Random weights from the recipe's seed, or a truncation of the model it derives from."""
    import torch
    from transformers import AutoModelForCausalLM

    config = build_config(recipe, tokenizer)
    torch.manual_seed(recipe.seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    scale = recipe.extra.get("last_layer_scale")
    if scale is not None:
        # A weaker last layer: the first-layer draft then predicts about 3 in 4 of the
        # target's greedy tokens, an acceptance like a trained draft's.
        last = model.model.layers[-1]
        with torch.no_grad():
            last.self_attn.o_proj.weight.mul_(scale)
            last.mlp.down_proj.weight.mul_(scale)
    if recipe.derived_from:
        parent = AutoModelForCausalLM.from_pretrained(outdir / recipe.derived_from, dtype=torch.float32)
        missing, _ = model.load_state_dict(parent.state_dict(), strict=False)
        if missing:
            raise RuntimeError(f"{recipe.name}: weights missing from {recipe.derived_from}: {missing[:3]}")
    return model


def mtp_weights(recipe: Recipe, model) -> dict:
    """Random weights of the MTP layer(s), named as vLLM's MTP loader of the architecture expects."""
    import torch

    gen = torch.Generator().manual_seed(recipe.seed + 1)
    hidden, inter = recipe.hidden_size, recipe.intermediate_size
    q_out, kv_out = recipe.heads * recipe.head_dim, recipe.kv_heads * recipe.head_dim

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.02

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=torch.float32)

    if recipe.architecture == "mimo":
        return mimo_mtp_weights(recipe, rand, ones)
    weights = {
        "mtp.fc.weight": rand(hidden, 2 * hidden),
        "mtp.pre_fc_norm_embedding.weight": ones(hidden),
        "mtp.pre_fc_norm_hidden.weight": ones(hidden),
        "mtp.norm.weight": ones(hidden),
    }
    for i in range(recipe.extra.get("mtp_layers", 1)):
        p = f"mtp.layers.{i}."
        weights |= {
            p + "input_layernorm.weight": ones(hidden),
            p + "post_attention_layernorm.weight": ones(hidden),
            # Qwen3.5 full attention has an output gate: q_proj emits query and gate.
            p + "self_attn.q_proj.weight": rand(2 * q_out, hidden),
            p + "self_attn.k_proj.weight": rand(kv_out, hidden),
            p + "self_attn.v_proj.weight": rand(kv_out, hidden),
            p + "self_attn.o_proj.weight": rand(hidden, q_out),
            p + "self_attn.q_norm.weight": ones(recipe.head_dim),
            p + "self_attn.k_norm.weight": ones(recipe.head_dim),
            p + "mlp.gate_proj.weight": rand(inter, hidden),
            p + "mlp.up_proj.weight": rand(inter, hidden),
            p + "mlp.down_proj.weight": rand(hidden, inter),
        }
    return weights


def mimo_mtp_weights(recipe: Recipe, rand, ones) -> dict:
    """MiMo's MTP layers (`model.mtp_layers.N.`): two norms, the input projection and a Qwen2 block."""
    hidden, inter = recipe.hidden_size, recipe.intermediate_size
    q_out, kv_out = recipe.heads * recipe.head_dim, recipe.kv_heads * recipe.head_dim
    weights = {}
    for i in range(recipe.extra.get("mtp_layers", 1)):
        p = f"model.mtp_layers.{i}."
        weights |= {
            p + "token_layernorm.weight": ones(hidden),
            p + "hidden_layernorm.weight": ones(hidden),
            p + "input_proj.weight": rand(hidden, 2 * hidden),
            p + "final_layernorm.weight": ones(hidden),
            p + "input_layernorm.weight": ones(hidden),
            p + "post_attention_layernorm.weight": ones(hidden),
            p + "self_attn.q_proj.weight": rand(q_out, hidden),
            p + "self_attn.q_proj.bias": rand(q_out),
            p + "self_attn.k_proj.weight": rand(kv_out, hidden),
            p + "self_attn.k_proj.bias": rand(kv_out),
            p + "self_attn.v_proj.weight": rand(kv_out, hidden),
            p + "self_attn.v_proj.bias": rand(kv_out),
            p + "self_attn.o_proj.weight": rand(hidden, q_out),
            p + "mlp.gate_proj.weight": rand(inter, hidden),
            p + "mlp.up_proj.weight": rand(inter, hidden),
            p + "mlp.down_proj.weight": rand(hidden, inter),
        }
    return weights


def file_hashes(directory: Path) -> dict[str, str]:
    """sha256 of every file in a model directory except the manifest."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MANIFEST
    }


def is_current(directory: Path, digest: str) -> bool:
    """Whether a directory holds this recipe's output with every file intact."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("recipe_sha256") == digest and manifest.get("files") == file_hashes(directory)


def generate(recipe: Recipe, outdir: Path) -> bool:
    """Write one model unless it is already current; True when it was (re)written."""
    target = outdir / recipe.name
    digest = recipe.digest()
    if is_current(target, digest):
        return False
    tokenizer = train_tokenizer(recipe.seed)
    model = build_model(recipe, tokenizer, outdir)
    staging = Path(tempfile.mkdtemp(prefix=f".{recipe.name}.", dir=outdir))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if recipe.architecture == "mimo":  # save_pretrained names the transformers class
            config_file = staging / "config.json"
            config = json.loads(config_file.read_text())
            config["architectures"] = ["MiMoForCausalLM"]
            config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if recipe.extra.get("mtp_layers"):
            from safetensors.torch import load_file, save_file

            weights = staging / "model.safetensors"
            save_file(load_file(weights) | mtp_weights(recipe, model), weights, metadata={"format": "pt"})
        manifest = {"recipe": asdict(recipe), "recipe_sha256": digest, "files": file_hashes(staging)}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        for path in staging.iterdir():
            path.chmod(0o644)
        staging.chmod(0o755)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return True


def main(argv: list[str] | None = None) -> int:
    """Command line: make_models.py OUTDIR [--seed N] [--mtp] [--only NAME ...]."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--mtp", action="store_true", help="also write the MTP models (MiMo, Qwen3.5)")
    parser.add_argument("--only", action="append", default=[], help="generate only this model (repeatable)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    selected = recipes(args.seed, args.mtp)
    names = [r.name for r in selected]
    unknown = [n for n in args.only if n not in names]
    if unknown:
        allowed = ", ".join(names)
        print(f"make_models.py: unknown model {unknown[0]!r}: choose from {allowed}", file=sys.stderr)
        return 2
    args.outdir.mkdir(parents=True, exist_ok=True)
    for recipe in selected:
        if args.only and recipe.name not in args.only:
            continue
        written = generate(recipe, args.outdir)
        print(f"{recipe.name}: {'written' if written else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
