"""Deterministic model factory: HF directories and matching GGUF files.

No hub, no downloads: every model omni benchmarks is made here from a shape
preset and a seed, so the same preset gives the same bytes (and digest) on
every machine. Weights are drawn with numpy's PCG64, rounded to bf16 and
written twice: as safetensors in an HF directory (for vLLM/transformers) and
as a GGUF file (for llama.cpp), converted exactly the way llama.cpp's
``convert_hf_to_gguf.py`` does (q/k rows permuted for its RoPE layout).
Quantized GGUFs come from llama.cpp's own ``llama_model_quantize``.

Runs inside an engine env: needs numpy and gguf (and llama_cpp to quantize).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

N_SPECIAL = 3  # <unk> <s> </s>
N_BYTES = 256  # <0x00> .. <0xFF>, as in Llama 2's SentencePiece vocabulary


@dataclass(frozen=True)
class Shape:
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    max_positions: int
    rope_theta: float
    tie_embeddings: bool
    weights: bool  # False: config and tokenizer only, for vLLM load_format=dummy

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


PRESETS: dict[str, Shape] = {
    # tests: 4 layers, hidden 256, Llama 2's vocabulary size (vllm bench feeds ids < 10000)
    "tiny-llama": Shape(32000, 256, 768, 4, 4, 2, 2048, 10000.0, False, True),
    # Llama-3.2-1B's dimensions, run with load_format=dummy: real shapes, no download
    "llama-3.2-1b-shape": Shape(128256, 2048, 8192, 16, 32, 8, 8192, 500000.0, True, False),
}
GGUF_TYPES = ("bf16", "q8_0", "q4_0")
SEED = 20261130
RMS_EPS = 1e-5


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (uint16), round to nearest even."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def hf_tensors(shape: Shape, seed: int = SEED) -> dict[str, np.ndarray]:
    """Every weight as bf16 bits, in HF Llama names, drawn in a fixed order."""
    rng = np.random.Generator(np.random.PCG64(seed))
    kv = shape.kv_heads * shape.head_dim

    def normal(rows: int, cols: int, std: float = 0.02) -> np.ndarray:
        return bf16_bits(rng.standard_normal((rows, cols), dtype=np.float32) * std)

    def norm() -> np.ndarray:
        return bf16_bits(1.0 + rng.standard_normal(shape.hidden, dtype=np.float32) * 0.05)

    tensors = {"model.embed_tokens.weight": normal(shape.vocab, shape.hidden, 1.0)}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = norm()
        tensors[p + "self_attn.q_proj.weight"] = normal(shape.hidden, shape.hidden)
        tensors[p + "self_attn.k_proj.weight"] = normal(kv, shape.hidden)
        tensors[p + "self_attn.v_proj.weight"] = normal(kv, shape.hidden)
        tensors[p + "self_attn.o_proj.weight"] = normal(shape.hidden, shape.hidden)
        tensors[p + "post_attention_layernorm.weight"] = norm()
        tensors[p + "mlp.gate_proj.weight"] = normal(shape.intermediate, shape.hidden)
        tensors[p + "mlp.up_proj.weight"] = normal(shape.intermediate, shape.hidden)
        tensors[p + "mlp.down_proj.weight"] = normal(shape.hidden, shape.intermediate)
    tensors["model.norm.weight"] = norm()
    if not shape.tie_embeddings:
        tensors["lm_head.weight"] = normal(shape.vocab, shape.hidden, 0.05)
    return tensors


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """safetensors by hand: 8-byte header length, JSON header, raw bf16 data."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(tensors):
        size = tensors[name].nbytes
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name in sorted(tensors):
            f.write(np.ascontiguousarray(tensors[name]).tobytes())


def vocabulary(shape: Shape) -> list[str]:
    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(N_BYTES)]
    words = [f"\u2581t{i}" for i in range(shape.vocab - N_SPECIAL - N_BYTES)]
    return specials + byte_tokens + words


def hf_config(shape: Shape) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "torch_dtype": "bfloat16",
        "vocab_size": shape.vocab,
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "max_position_embeddings": shape.max_positions,
        "rope_theta": shape.rope_theta,
        "rms_norm_eps": RMS_EPS,
        "hidden_act": "silu",
        "tie_word_embeddings": shape.tie_embeddings,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "attention_bias": False,
        "mlp_bias": False,
    }


def write_tokenizer(out: Path, shape: Shape) -> None:
    """A WordLevel tokenizer.json of the full vocabulary (loads offline in transformers)."""
    vocab = {tok: i for i, tok in enumerate(vocabulary(shape))}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, t in enumerate(["<unk>", "<s>", "</s>"])
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, sort_keys=True))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": shape.max_positions,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, sort_keys=True))
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, sort_keys=True)
    )


def permute_rope(w: np.ndarray, heads: int) -> np.ndarray:
    """HF's rotate-half q/k row order -> llama.cpp's interleaved (convert_hf_to_gguf.py)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(hf: str) -> str:
    table = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if hf in table:
        return table[hf]
    layer, rest = hf.removeprefix("model.layers.").split(".", 1)
    parts = {
        "input_layernorm.weight": "attn_norm",
        "post_attention_layernorm.weight": "ffn_norm",
        "self_attn.q_proj.weight": "attn_q",
        "self_attn.k_proj.weight": "attn_k",
        "self_attn.v_proj.weight": "attn_v",
        "self_attn.o_proj.weight": "attn_output",
        "mlp.gate_proj.weight": "ffn_gate",
        "mlp.up_proj.weight": "ffn_up",
        "mlp.down_proj.weight": "ffn_down",
    }
    return f"blk.{layer}.{parts[rest]}.weight"


def write_gguf(path: Path, name: str, shape: Shape, tensors: dict[str, np.ndarray]) -> None:
    """The same weights as GGUF: matrices bf16, norms f32 (as llama.cpp's converter does)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(shape.max_positions)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.intermediate)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_vocab_size(shape.vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    tokens = vocabulary(shape)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(
        [0.0] * N_SPECIAL + [0.0] * N_BYTES + [-float(i) for i in range(len(tokens) - N_SPECIAL - N_BYTES)]
    )
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * N_BYTES + [gguf.TokenType.NORMAL] * (len(tokens) - N_SPECIAL - N_BYTES)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    for hf in tensors:  # insertion order = layer order, stable
        data = tensors[hf]
        if hf.endswith("q_proj.weight"):
            data = permute_rope(data, shape.heads)
        elif hf.endswith("k_proj.weight"):
            data = permute_rope(data, shape.kv_heads)
        if data.ndim == 1:
            writer.add_tensor(gguf_name(hf), bf16_to_f32(data))
        else:
            writer.add_tensor(gguf_name(hf), data, raw_dtype=gguf.GGMLQuantizationType.BF16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def quantize_gguf(src: Path, dst: Path, kind: str) -> None:
    """Quantize with llama.cpp's own ``llama_model_quantize``."""
    import llama_cpp

    ftype = {"q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, "q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0}[kind]
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 1  # one thread: the same bytes every time
    tmp = dst.with_name(f".{dst.name}.tmp")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src} -> {kind}) returned {rc}")
    os.replace(tmp, dst)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def dir_digest(directory: Path) -> str:
    """sha256 over (name, sha256) of every file: the HF model's identity."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.iterdir() if p.is_file()):
        digest.update(f"{path.name}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def make_model(preset: str, out: Path, gguf_types: tuple[str, ...] = GGUF_TYPES) -> dict:
    """Write ``out/hf`` and ``out/<preset>-<type>.gguf``; return the manifest."""
    shape = PRESETS[preset]
    hf_dir = out / "hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    (hf_dir / "config.json").write_text(json.dumps(hf_config(shape), sort_keys=True, indent=1))
    (hf_dir / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    write_tokenizer(hf_dir, shape)
    manifest = {"preset": preset, "shape": asdict(shape), "seed": SEED, "gguf": {}}
    if shape.weights:
        tensors = hf_tensors(shape)
        write_safetensors(hf_dir / "model.safetensors", tensors)
        base = out / f"{preset}-bf16.gguf"
        write_gguf(base, preset, shape, tensors)
        manifest["gguf"]["bf16"] = {"file": base.name, "sha256": file_sha256(base)}
        for kind in gguf_types:
            if kind != "bf16":
                path = out / f"{preset}-{kind}.gguf"
                quantize_gguf(base, path, kind)
                manifest["gguf"][kind] = {"file": path.name, "sha256": file_sha256(path)}
    manifest["hf_sha256"] = dir_digest(hf_dir)
    manifest["load_format"] = "auto" if shape.weights else "dummy"
    (out / "manifest.json").write_text(json.dumps(manifest, sort_keys=True, indent=1))
    return manifest


if __name__ == "__main__":
    # python -m omni.models PRESET OUT  (run inside an engine env by `omni models make`)
    result = make_model(sys.argv[1], Path(sys.argv[2]))
    print(json.dumps(result, sort_keys=True))
