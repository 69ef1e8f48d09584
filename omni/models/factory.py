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
from collections.abc import Iterable, Iterator
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
    weights: bool  # False: the HF directory is config and tokenizer only, for vLLM load_format=dummy
    # GGUFs written one type at a time when an arm asks for it, a tensor at a
    # time (a 1B bf16 GGUF is 2.5 GB of random weights, an 8B one 16 GB)
    gguf_on_demand: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token, bf16 (both engines' KV dtype here)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


PRESETS: dict[str, Shape] = {
    # tests: 4 layers, hidden 256, Llama 2's vocabulary size (vllm bench feeds ids < 10000);
    # 4096 positions so vLLM's CPU-suite shape 2048 in + 128 out fits max_model_len
    "tiny-llama": Shape(32000, 256, 768, 4, 4, 2, 4096, 10000.0, False, True),
    # Llama-3.2-1B's dimensions, run with load_format=dummy: real shapes, no download
    "llama-3.2-1b-shape": Shape(128256, 2048, 8192, 16, 32, 8, 8192, 500000.0, True, False, gguf_on_demand=True),
    # Llama-3.1-8B's dimensions (untied head): for a real host, 16 GB as a bf16 GGUF
    "llama-3.1-8b-shape": Shape(128256, 4096, 14336, 32, 32, 8, 131072, 500000.0, False, False, gguf_on_demand=True),
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


def tensor_specs(shape: Shape) -> list[tuple[str, tuple[int, ...], float]]:
    """(HF name, dims, std) of every weight in draw order; std 0: a norm (1 + N(0, 0.05))."""
    kv = shape.kv_heads * shape.head_dim
    h, ff = shape.hidden, shape.intermediate
    specs = [("model.embed_tokens.weight", (shape.vocab, h), 1.0)]
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        specs += [
            (p + "input_layernorm.weight", (h,), 0.0),
            (p + "self_attn.q_proj.weight", (h, h), 0.02),
            (p + "self_attn.k_proj.weight", (kv, h), 0.02),
            (p + "self_attn.v_proj.weight", (kv, h), 0.02),
            (p + "self_attn.o_proj.weight", (h, h), 0.02),
            (p + "post_attention_layernorm.weight", (h,), 0.0),
            (p + "mlp.gate_proj.weight", (ff, h), 0.02),
            (p + "mlp.up_proj.weight", (ff, h), 0.02),
            (p + "mlp.down_proj.weight", (h, ff), 0.02),
        ]
    specs.append(("model.norm.weight", (h,), 0.0))
    if not shape.tie_embeddings:
        specs.append(("lm_head.weight", (shape.vocab, h), 0.05))
    return specs


# rows drawn at once: bounds the float32 draw of a big matrix (the 8B head is
# 0.5 G values) to 64 MiB; PCG64 keeps its state between draws, so the values
# are those of one draw of the whole matrix
DRAW_VALUES = 1 << 24


def iter_hf_tensors(shape: Shape, seed: int = SEED) -> Iterator[tuple[str, np.ndarray]]:
    """Every weight as bf16 bits, in HF Llama names, drawn in a fixed order, one at a time."""
    rng = np.random.Generator(np.random.PCG64(seed))
    for name, dims, std in tensor_specs(shape):
        if std == 0.0:
            yield name, bf16_bits(1.0 + rng.standard_normal(dims[0], dtype=np.float32) * 0.05)
            continue
        rows, cols = dims
        out = np.empty(dims, dtype=np.uint16)
        step = max(1, DRAW_VALUES // cols)
        for start in range(0, rows, step):
            n = min(step, rows - start)
            out[start : start + n] = bf16_bits(rng.standard_normal((n, cols), dtype=np.float32) * std)
        yield name, out


def hf_tensors(shape: Shape, seed: int = SEED) -> dict[str, np.ndarray]:
    """Every weight as bf16 bits, in HF Llama names, drawn in a fixed order."""
    return dict(iter_hf_tensors(shape, seed))


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


# The word tokens are "▁" and one character (CJK ideographs, then Hangul
# syllables), then "▁" and two: text decoded from any of them tokenizes back to
# the same ids in both tokenizers, the HF one the load generator counts with
# and llama.cpp's SentencePiece one (which builds "▁AB" from "▁", "▁A"
# and "B", each in the vocabulary), so a server is sent the prompt length
# the client counted.
WORD_CHARS = "".join(chr(c) for lo, hi in ((0x4E00, 0x9FFF), (0xAC00, 0xD7A3)) for c in range(lo, hi + 1))


def word(i: int) -> str:
    if i < len(WORD_CHARS):
        return f"\u2581{WORD_CHARS[i]}"
    first, second = divmod(i - len(WORD_CHARS), len(WORD_CHARS))
    return f"\u2581{WORD_CHARS[first]}{WORD_CHARS[second]}"


def byte_tokens() -> list[str]:
    return [f"<0x{b:02X}>" for b in range(N_BYTES)]


def vocabulary(shape: Shape) -> list[str]:
    specials = ["<unk>", "<s>", "</s>"]
    return specials + byte_tokens() + [word(i) for i in range(shape.vocab - N_SPECIAL - N_BYTES)]


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
        # words are "▁" + characters: text is the characters, a space before
        # each word but the first, as SentencePiece writes it
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        "post_processor": None,
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
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
        # the byte tokens are special to HF: no text decodes to them in both
        # tokenizers alike, and a load generator samples prompts from the rest
        json.dumps(
            {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "additional_special_tokens": byte_tokens()},
            sort_keys=True,
        )
    )


# The factory's models have no chat template in their files (tokenizer_config.json,
# GGUF metadata); a chat arm gives this one to its server (--chat-template): each
# message's content as it is, no role markers, so a chat request's prompt is the
# text the load generator counted, token for token, on both servers. Kept out
# of the files so that making it changed no model's digest.
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def served_chat_template(arm: dict) -> str | None:
    """The template a server of ``arm`` is given for the chat endpoint: the
    factory's (:data:`CHAT_TEMPLATE`) for a chat arm on a factory model,
    whose files carry none; None otherwise (another model brings its own)."""
    chat = (arm.get("load") or {}).get("endpoint") == "chat"
    return CHAT_TEMPLATE if chat and arm.get("model") in PRESETS else None


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


def gguf_writer(path: Path, name: str, shape: Shape):
    """A GGUFWriter with the model's metadata and tokenizer, no tensors yet."""
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
    return writer


def gguf_tensor(hf: str, data: np.ndarray, shape: Shape) -> tuple[str, np.ndarray, bool]:
    """(GGUF name, data, is bf16): q/k rows permuted for llama.cpp's RoPE,
    norms f32, matrices bf16 (as llama.cpp's converter writes them)."""
    if hf.endswith("q_proj.weight"):
        data = permute_rope(data, shape.heads)
    elif hf.endswith("k_proj.weight"):
        data = permute_rope(data, shape.kv_heads)
    if data.ndim == 1:
        return gguf_name(hf), bf16_to_f32(data), False
    return gguf_name(hf), data, True


def write_gguf(path: Path, name: str, shape: Shape, tensors: dict[str, np.ndarray]) -> None:
    """The same weights as GGUF: matrices bf16, norms f32 (as llama.cpp's converter does)."""
    import gguf

    writer = gguf_writer(path, name, shape)
    for hf in tensors:  # insertion order = layer order, stable
        gname, data, bf16 = gguf_tensor(hf, tensors[hf], shape)
        writer.add_tensor(gname, data, raw_dtype=gguf.GGMLQuantizationType.BF16 if bf16 else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_gguf_streamed(path: Path, name: str, shape: Shape, tensors: Iterable[tuple[str, np.ndarray]]) -> None:
    """:func:`write_gguf`'s bytes without holding the model: every tensor's
    info is declared from the shape first (GGUF puts it all before the data),
    then each tensor is drawn, written and dropped in turn."""
    import gguf

    writer = gguf_writer(path, name, shape)
    for hf, dims, _ in tensor_specs(shape):
        bf16 = len(dims) == 2
        dtype = np.dtype(np.uint16 if bf16 else np.float32)
        writer.add_tensor_info(
            gguf_name(hf),
            dims,
            dtype,
            int(np.prod(dims)) * dtype.itemsize,
            raw_dtype=gguf.GGMLQuantizationType.BF16 if bf16 else None,
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for hf, data in tensors:
        writer.write_tensor_data(gguf_tensor(hf, data, shape)[1])
    writer.close()


def quantize_gguf(src: Path, dst: Path, kind: str, output_f16: bool = False) -> None:
    """Quantize with llama.cpp's own ``llama_model_quantize``. ``output_f16``:
    keep ``output.weight`` in f16 (``llama-quantize --output-tensor-type f16``),
    so the file type claims ``kind`` while its head is dense."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = {"q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, "q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0}[kind]
    if output_f16:
        params.output_tensor_type = llama_cpp.GGML_TYPE_F16
    params.nthread = 1  # one thread: the same bytes every time
    tmp = dst.with_name(f".{dst.name}.tmp")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
    if rc != 0:
        head = ", f16 output" if output_f16 else ""
        raise RuntimeError(f"llama_model_quantize({src} -> {kind}{head}) returned {rc}")
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
    """Write ``out/hf`` and ``out/<preset>-<type>.gguf``; return the manifest.
    A preset whose GGUFs are made on demand gets only the types asked for
    (those already there are kept)."""
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
    elif shape.gguf_on_demand:
        manifest["gguf"] = make_ggufs_on_demand(preset, out, gguf_types)
    manifest["hf_sha256"] = dir_digest(hf_dir)
    manifest["load_format"] = "auto" if shape.weights else "dummy"
    tmp = out / ".manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, sort_keys=True, indent=1))
    os.replace(tmp, out / "manifest.json")  # a half-made model has no manifest: made again next time
    return manifest


def make_ggufs_on_demand(preset: str, out: Path, kinds: tuple[str, ...]) -> dict:
    """The preset's GGUFs of ``kinds``, streamed from the seed (bf16, kept: the
    quantizer's source) and quantized from it; those the manifest already has
    are kept as they are."""
    shape = PRESETS[preset]
    old = out / "manifest.json"
    made = json.loads(old.read_text()).get("gguf", {}) if old.exists() else {}
    base = out / f"{preset}-bf16.gguf"
    todo = [k for k in dict.fromkeys(kinds) if k not in made]
    if todo and "bf16" not in made:
        todo = ["bf16", *(k for k in todo if k != "bf16")]  # the source of the others
    for kind in todo:
        path = out / f"{preset}-{kind}.gguf"
        if kind == "bf16":
            tmp = base.with_name(f".{base.name}.tmp")
            write_gguf_streamed(tmp, preset, shape, iter_hf_tensors(shape))
            os.replace(tmp, base)
        else:
            quantize_gguf(base, path, kind)
        made[kind] = {"file": path.name, "sha256": file_sha256(path)}
    return made


# --- models whose output head is not what they claim (omni.measure.heads) ---

# cpu_int4 checkpoints that claim a quantized head (lm_head_bf16: false): one
# honest, one that also lists lm_head under modules_to_not_convert, the skip
# list loaders honour, so it loads dense: the retracted W4A8 checkpoint, whose
# config said one thing and whose loader did another.
HEAD_CASES = {"int4-honest-head": False, "int4-dense-head": True}
DENSE_HEAD_GGUF = "q4_0-f16-output"


def claimed_int4_config(config: dict, head_dense: bool, group_size: int = 32) -> dict:
    """An HF config.json that claims cpu_int4 with a quantized head (and, with
    ``head_dense``, keeps the head out of the quantization all the same)."""
    quantization = {"quant_method": "cpu_int4", "group_size": group_size, "lm_head_bf16": False}
    if head_dense:
        quantization["modules_to_not_convert"] = ["lm_head"]
    return {**config, "quantization_config": quantization}


def make_claimed_int4(src_hf: Path, out: Path, head_dense: bool) -> Path:
    """A checkpoint directory: ``src_hf``'s files (hard links, or copies across
    file systems) with a config.json that claims a quantized head."""
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(p for p in src_hf.iterdir() if p.is_file() and p.name != "config.json"):
        target = out / path.name
        if not target.exists():
            try:
                os.link(path, target)
            except OSError:
                target.write_bytes(path.read_bytes())
    config = claimed_int4_config(json.loads((src_hf / "config.json").read_text()), head_dense)
    (out / "config.json").write_text(json.dumps(config, sort_keys=True, indent=1))
    return out


def quantize_dense_head(src: Path, dst: Path) -> None:
    """A q4_0 GGUF (general.file_type MOSTLY_Q4_0) whose output.weight stays f16:
    its file type claims q4_0; its head is dense."""
    quantize_gguf(src, dst, "q4_0", output_f16=True)


def make_head_cases(preset_dir: Path, out: Path) -> dict[str, str]:
    """The head cases of a made preset with weights (tiny-llama), in ``out``:
    name -> path. The GGUF needs llama_cpp (run in the llamacpp env); what is
    already there is kept."""
    preset = json.loads((preset_dir / "manifest.json").read_text())["preset"]
    made = {name: str(make_claimed_int4(preset_dir / "hf", out / name, dense)) for name, dense in HEAD_CASES.items()}
    gguf = out / f"{preset}-{DENSE_HEAD_GGUF}.gguf"
    if not gguf.exists():
        quantize_dense_head(preset_dir / f"{preset}-bf16.gguf", gguf)
    made[DENSE_HEAD_GGUF] = str(gguf)
    return made


if __name__ == "__main__":
    # python -m omni.models.factory PRESET OUT [GGUF_TYPE ...]  (run inside an engine env by `omni models make`);
    # types: the GGUFs a preset that makes them on demand should have (default: all, for the others)
    kinds = tuple(sys.argv[3:]) or (GGUF_TYPES if PRESETS[sys.argv[1]].weights else ())
    result = make_model(sys.argv[1], Path(sys.argv[2]), kinds)
    print(json.dumps(result, sort_keys=True))
