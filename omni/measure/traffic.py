"""What a run moves and computes per token, from the model's own files.

A decoder-only transformer (Llama's layout: attention with grouped KV heads,
a gated MLP, RMS norms, an embedding table and an output head) is read as
its tensors, each with its element count and its size as stored, and a role:

- ``embedding``: the token table; a token reads one row of it;
- ``head``: the output projection; with tied embeddings the table itself;
- ``body``: the layers' matrices (every weight a token multiplies by);
- ``norm``: the 1-D vectors (read, negligible FLOPs).

Sources (:func:`model_layout`): a GGUF file (tensor sizes and types as
llama.cpp stores them, quantization blocks included, read with ``gguf``'s
reader), an HF directory's safetensors (shapes and dtypes from the header,
with ``safetensors``; nothing is loaded), or, for an HF directory without
weights (``load_format: dummy``), its config.json's shapes at its dtype.
A vLLM ``cpu_int4`` arm quantizes at load: :func:`as_cpu_int4` counts its
linear weights as the plugin packs them (4 bits, plus a bf16 scale and zero
per group).

Per run (:func:`run_traffic`), at its prompt length P, output length T and
batch B, where a decoded token attends to P + k positions at its k-th step
(mean depth D = P + T/2):

- decode bytes per token = (every weight but the embedding table, once per
  step) / B + one embedding row + the KV cache read at depth D;
- decode FLOPs per token = 2 (body + head) + 4 L H d D (QK^T and AV);
- prefill FLOPs per token = 2 body + 2 head / P (the head runs on each
  sequence's last prompt token only, in vLLM and llama.cpp alike)
  + 2 L H d (P + 1) (causal attention: a token at position p attends p);
- prefill bytes per token = the weights once per batch prefill / (B P) +
  the KV written.

Facts layer: files in, frozen dataclasses out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from omni.errors import OmniError

ROLES = ("embedding", "head", "body", "norm")
DTYPE_BYTES = {
    "BF16": 2,
    "F16": 2,
    "F32": 4,
    "F64": 8,
    "I8": 1,
    "U8": 1,
    "I32": 4,
    "I64": 8,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
TORCH_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
INT4_SCALE_BYTES = 4  # cpu_int4: a bf16 scale and a bf16 zero per group and output row


@dataclass(frozen=True)
class Tensor:
    name: str
    elements: int
    nbytes: int
    role: str
    dtype: str


@dataclass(frozen=True)
class Layout:
    """A model's tensors and the dimensions attention costs are counted from."""

    source: str  # gguf | safetensors | config
    tensors: tuple[Tensor, ...]
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    def role_bytes(self, role: str) -> int:
        return sum(t.nbytes for t in self.tensors if t.role == role)

    def role_params(self, role: str) -> int:
        return sum(t.elements for t in self.tensors if t.role == role)

    @property
    def tied(self) -> bool:
        return not any(t.role == "head" for t in self.tensors)

    @property
    def head_params(self) -> int:
        return self.role_params("embedding") if self.tied else self.role_params("head")

    @property
    def step_weight_bytes(self) -> int:
        """Weights one decode step reads: all but the token table, which only
        a tied head reads whole."""
        table = self.role_bytes("embedding")
        return self.role_bytes("head") + self.role_bytes("body") + self.role_bytes("norm") + (table if self.tied else 0)

    @property
    def embedding_row_bytes(self) -> float:
        return self.role_bytes("embedding") / self.vocab

    @property
    def body_dtype(self) -> str:
        """The type holding most of the body's bytes (``q4_0``, ``bf16``, ...)."""
        sizes: dict[str, int] = {}
        for t in self.tensors:
            if t.role == "body":
                sizes[t.dtype] = sizes.get(t.dtype, 0) + t.nbytes
        return max(sizes, key=sizes.__getitem__) if sizes else "unknown"


@dataclass(frozen=True)
class Traffic:
    """One run's bytes and FLOPs per token (see the module docstring)."""

    decode_bytes_per_token: float
    decode_flops_per_token: float
    prefill_bytes_per_token: float
    prefill_flops_per_token: float
    decode_step_bytes: float  # what one decode step of the whole batch reads: its working set

    @property
    def decode_intensity(self) -> float:
        return self.decode_flops_per_token / self.decode_bytes_per_token

    @property
    def prefill_intensity(self) -> float:
        return self.prefill_flops_per_token / self.prefill_bytes_per_token


def kv_position_bytes(layout: Layout, kv_element_bytes: int) -> int:
    """K and V of every layer for one position."""
    return 2 * layout.layers * layout.kv_heads * layout.head_dim * kv_element_bytes


def run_traffic(layout: Layout, prompt_len: int, max_tokens: int, batch: int, kv_element_bytes: int = 2) -> Traffic:
    if prompt_len < 1 or max_tokens < 1 or batch < 1:
        raise OmniError(
            f"traffic of a run needs prompt_len, max_tokens and batch >= 1 (got {prompt_len}, {max_tokens}, {batch})"
        )
    depth = prompt_len + max_tokens / 2
    kv = kv_position_bytes(layout, kv_element_bytes)
    attention = layout.layers * layout.heads * layout.head_dim
    body, head = layout.role_params("body"), layout.head_params
    weights = layout.step_weight_bytes
    return Traffic(
        decode_bytes_per_token=weights / batch + layout.embedding_row_bytes + kv * depth,
        decode_flops_per_token=2.0 * (body + head) + 4.0 * attention * depth,
        prefill_bytes_per_token=weights / (batch * prompt_len) + layout.embedding_row_bytes + kv,
        prefill_flops_per_token=2.0 * body + 2.0 * head / prompt_len + 2.0 * attention * (prompt_len + 1),
        decode_step_bytes=weights + batch * (layout.embedding_row_bytes + kv * depth),
    )


def gguf_role(name: str, dims: int) -> str:
    if name == "token_embd.weight":
        return "embedding"
    if name == "output.weight":
        return "head"
    return "body" if dims >= 2 and name.startswith("blk.") else "norm"


def gguf_layout(path: Path) -> Layout:
    """A GGUF's tensors as stored (``gguf.GGUFReader`` reads the header; the data stays mapped)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except (OSError, ValueError) as e:
        raise OmniError(f"{path}: not a readable GGUF ({e})") from e
    arch = reader.fields["general.architecture"].contents()

    def number(key: str) -> int:
        field = reader.fields.get(f"{arch}.{key}")
        if field is None:
            raise OmniError(f"{path}: GGUF has no {arch}.{key}; only Llama-like layouts are modelled")
        return int(field.contents())

    tensors = tuple(
        Tensor(t.name, int(t.n_elements), int(t.n_bytes), gguf_role(t.name, len(t.shape)), t.tensor_type.name.lower())
        for t in reader.tensors
    )
    heads, hidden = number("attention.head_count"), number("embedding_length")
    embedding = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if embedding is None:
        raise OmniError(f"{path}: GGUF has no token_embd.weight")
    return Layout(
        source="gguf",
        tensors=tensors,
        layers=number("block_count"),
        heads=heads,
        kv_heads=number("attention.head_count_kv"),
        head_dim=hidden // heads,
        vocab=int(embedding.n_elements) // hidden,
    )


def hf_role(name: str, dims: int) -> str:
    if name.endswith("embed_tokens.weight"):
        return "embedding"
    if name.startswith("lm_head."):
        return "head"
    return "body" if dims >= 2 and ".layers." in name else "norm"


def read_config(directory: Path) -> dict:
    try:
        return json.loads((directory / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise OmniError(f"{directory}: no readable config.json ({e}); an HF model directory has one") from e


def config_tensors(config: dict) -> list[tuple[str, tuple[int, ...]]]:
    """A Llama-like config's tensors and shapes (what ``load_format: dummy`` makes)."""
    hidden, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads) * (config.get("head_dim") or hidden // heads)
    q = heads * (config.get("head_dim") or hidden // heads)
    shapes = [("model.embed_tokens.weight", (config["vocab_size"], hidden)), ("model.norm.weight", (hidden,))]
    if not config.get("tie_word_embeddings", False):
        shapes.append(("lm_head.weight", (config["vocab_size"], hidden)))
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes += [
            (p + "self_attn.q_proj.weight", (q, hidden)),
            (p + "self_attn.k_proj.weight", (kv, hidden)),
            (p + "self_attn.v_proj.weight", (kv, hidden)),
            (p + "self_attn.o_proj.weight", (hidden, q)),
            (p + "mlp.gate_proj.weight", (inter, hidden)),
            (p + "mlp.up_proj.weight", (inter, hidden)),
            (p + "mlp.down_proj.weight", (hidden, inter)),
            (p + "input_layernorm.weight", (hidden,)),
            (p + "post_attention_layernorm.weight", (hidden,)),
        ]
    return shapes


def safetensors_tensors(files: list[Path]) -> list[Tensor]:
    from safetensors import safe_open

    tensors = []
    for file in files:
        with safe_open(file, framework="numpy") as f:
            for name in f.keys():
                piece = f.get_slice(name)
                shape, dtype = piece.get_shape(), piece.get_dtype()
                elements = 1
                for n in shape:
                    elements *= n
                if dtype not in DTYPE_BYTES:
                    raise OmniError(f"{file}: tensor {name} has dtype {dtype}, which omni's bytes model does not size")
                tensors.append(
                    Tensor(name, elements, elements * DTYPE_BYTES[dtype], hf_role(name, len(shape)), dtype.lower())
                )
    return tensors


def hf_layout(directory: Path) -> Layout:
    config = read_config(directory)
    if "Llama" not in "".join(config.get("architectures", [])) and config.get("model_type") != "llama":
        raise OmniError(f"{directory}: architecture {config.get('architectures')} is not modelled (Llama-like only)")
    files = sorted(directory.glob("*.safetensors"))
    if files:
        tensors, source = safetensors_tensors(files), "safetensors"
    else:
        size = TORCH_DTYPE_BYTES.get(config.get("torch_dtype", "bfloat16"), 2)
        tensors, source = [], "config"
        for name, shape in config_tensors(config):
            elements = 1
            for n in shape:
                elements *= n
            dtype = config.get("torch_dtype", "bfloat16")
            tensors.append(Tensor(name, elements, elements * size, hf_role(name, len(shape)), dtype))
    heads = config["num_attention_heads"]
    return Layout(
        source=source,
        tensors=tuple(tensors),
        layers=config["num_hidden_layers"],
        heads=heads,
        kv_heads=config.get("num_key_value_heads", heads),
        head_dim=config.get("head_dim") or config["hidden_size"] // heads,
        vocab=config["vocab_size"],
    )


def model_layout(path: str | Path) -> Layout:
    path = Path(path)
    if path.is_dir():
        return hf_layout(path)
    if path.suffix == ".gguf":
        return gguf_layout(path)
    raise OmniError(f"{path}: neither an HF directory nor a .gguf file; the bytes model reads one of those")


def as_cpu_int4(layout: Layout, group_size: int, head_too: bool) -> Layout:
    """The layout as the cpu_int4 plugin holds it after loading: each linear
    weight at 4 bits plus a bf16 scale and zero per group of its input."""

    def packed(t: Tensor) -> Tensor:
        quantize = t.role == "body" or (head_too and t.role == "head")
        if not quantize:
            return t
        nbytes = t.elements // 2 + t.elements // group_size * INT4_SCALE_BYTES
        return replace(t, nbytes=nbytes, dtype=f"int4_g{group_size}")

    return replace(layout, tensors=tuple(packed(t) for t in layout.tensors))


COMPUTE_DTYPES = {
    "f32": "fp32",
    "float32": "fp32",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "f16": "fp32",
    "float16": "fp32",
}


def compute_dtype(body_dtype: str) -> str:
    """The matmul peak a body dtype runs against: ggml's quantized types (q8_0,
    q4_0, k-quants) multiply as int8 dot products against activations
    quantized to q8; cpu_int4 dequantizes to bf16; float types as themselves."""
    if body_dtype.startswith("int4_g"):
        return "bf16"
    if re.match(r"^(q\d|iq\d)", body_dtype):
        return "int8"
    return COMPUTE_DTYPES.get(body_dtype, "bf16")
