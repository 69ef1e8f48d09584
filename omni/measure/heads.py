"""The output head, as claimed and as loaded: the dense-head rule.

A quantized model whose output head stayed dense while everyone believed it
quantized produces numbers for a model nobody meant to run (origin notes:
the retracted W4A8 profiles, ``_C::onednn_mm`` at about 2.97 ms/step). So
every run of a real engine reports the head's weight type as the engine
loaded it (``omni.engines``), and this module sets it against every claim
that the head is quantized, profiled or not:

- the arm's claim: vLLM ``quantization: cpu_int4`` with
  ``params.int4_lm_head`` (true by default); llama.cpp ``params.gguf: q8_0 |
  q4_0`` of a model preset, made by ``llama_model_quantize``, whose default
  quantizes ``output.weight`` too (to q6_K for q4_0, q8_0 for q8_0);
- the model's own claim, so a model given by path is checked as well: the
  ``quantization_config`` of an HF directory's config.json (``cpu_int4``
  with ``lm_head_bf16: false``, or the GPTQ/AutoRound ``lm_head: true``
  vLLM reads), and a GGUF's ``general.file_type`` when it is a quantized
  one (a "mostly Q4_0" file claims its output tensor quantized as well:
  that is what llama.cpp's own quantizer does unless told
  ``--leave-output-tensor`` or ``--output-tensor-type f16``).

Only a dense head (f32, f16, bf16) contradicts a claim: a q6_K or q8_0
``output.weight`` under a q4_0 file type is llama.cpp's own rule, not a lie.
Tied embeddings are the head (vLLM's ``lm_head`` is ``embed_tokens``; a GGUF
without ``output.weight`` multiplies by ``token_embd.weight``), and are
judged the same way. Pure: the engine's report and the arm in, a frozen
verdict out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DENSE_HEAD = "dense_head"  # the warning rule a contradicted claim raises
DENSE_HEAD_ERROR = "dense head"  # how the error of a run invalid under the rule begins
HEAD_UNCHECKED = "head_unchecked"  # a quantized claim, but the engine reported no head type

# weight types with no quantization, as torch, ggml and GGUF name them
DENSE_WEIGHT_TYPES = frozenset({"bf16", "f16", "f32", "f64", "bfloat16", "float16", "float32", "float64", "half"})
# GGUF general.file_type values (llama.cpp's llama_ftype) whose tensors are not quantized
DENSE_FILE_TYPES = frozenset({"ALL_F32", "MOSTLY_F16", "MOSTLY_BF16"})
QUANTIZED_GGUFS = ("q8_0", "q4_0")  # the preset GGUFs llama_model_quantize makes


def weight_type_name(name: str | None) -> str | None:
    """``torch.bfloat16`` / ``c10::BFloat16`` / ``BF16`` -> ``bfloat16`` / ``bf16``:
    lower case without the namespace, as the dense set spells them."""
    if not name:
        return None
    return name.rsplit(".", 1)[-1].rsplit("::", 1)[-1].lower()


def is_dense(weight_type: str | None) -> bool:
    return weight_type_name(weight_type) in DENSE_WEIGHT_TYPES


@dataclass(frozen=True)
class HeadClaim:
    quantized: bool  # whether the claim says the head is quantized
    by: str  # "arm" or "model"
    what: str  # the claim, as its source states it

    def describe(self) -> str:
        return f"{self.by}: {self.what}"


@dataclass(frozen=True)
class HeadCheck:
    weight_type: str | None  # the head's weight type as loaded
    tensor: str | None  # which tensor is the head (tied embeddings name the embedding)
    claim: HeadClaim | None  # the claim the row records: a quantized one if any, else the first
    quantization_seen: str | None  # the quantization the engine applied, whatever the arm said
    contradiction: str | None  # the error of a run whose quantized claim met a dense head
    unchecked: str | None  # why a quantized claim could not be checked


def arm_claim(engine: str, quantization: str | None, params: Mapping[str, Any], preset: bool) -> HeadClaim | None:
    """What the arm says about its head, when it says anything."""
    if engine == "vllm" and quantization == "cpu_int4":
        quantized = bool(params.get("int4_lm_head", True))
        return HeadClaim(quantized, "arm", f"cpu_int4 with int4_lm_head: {str(quantized).lower()}")
    if engine == "llamacpp" and preset and params.get("gguf"):
        # llama_model_quantize's default quantizes output.weight with the rest
        return HeadClaim(params["gguf"] in QUANTIZED_GGUFS, "arm", f"gguf: {params['gguf']}")
    return None


def model_claim(head: Mapping[str, Any]) -> HeadClaim | None:
    """What the model's own files say about its head (the engine read them)."""
    config = head.get("quantization_config")
    if isinstance(config, Mapping):
        method = config.get("quant_method")
        if method == "cpu_int4":
            quantized = not config.get("lm_head_bf16", True)
            what = f"lm_head_bf16: {str(not quantized).lower()}"
        else:
            quantized = bool(config.get("lm_head"))
            what = f"lm_head: {str(quantized).lower()}"
        return HeadClaim(quantized, "model", f"config.json quantization_config {method} with {what}")
    file_type = head.get("file_type")
    if file_type:
        return HeadClaim(file_type not in DENSE_FILE_TYPES, "model", f"general.file_type {file_type}")
    return None


def check_head(
    engine: str, quantization: str | None, params: Mapping[str, Any], preset: bool, head: Mapping[str, Any]
) -> HeadCheck:
    """The head as loaded against every claim about it.

    ``head`` is what the engine reported: ``weight_type`` and ``tensor`` as
    loaded, the model's ``quantization_config`` (HF) or ``file_type`` (GGUF),
    and ``quantization`` as the engine applied it.
    """
    arm = arm_claim(engine, quantization, params, preset)
    # a vLLM arm's quantization replaces the checkpoint's quantization_config
    # (hf_overrides): then the arm's is the only claim on what loads
    model = None if arm is not None and engine == "vllm" else model_claim(head)
    claims = [c for c in (arm, model) if c]
    quantized = [c for c in claims if c.quantized]
    weight_type, tensor = head.get("weight_type"), head.get("tensor")
    contradiction = unchecked = None
    if quantized and weight_type is None:
        unchecked = (
            f"{HEAD_UNCHECKED}: the output head is claimed quantized ({quantized[0].describe()}) but the engine "
            f"reported no head type ({head.get('error') or 'no report'}): the claim is unchecked"
        )
    if quantized and is_dense(weight_type):
        said = "; ".join(c.describe() for c in quantized)
        contradiction = (
            f"{DENSE_HEAD_ERROR}: the output head is claimed quantized ({said}) but loaded as {weight_type} "
            f"({tensor}{', ' + head['method'] if head.get('method') else ''}): every number of the run is for "
            "a model with a dense head"
        )
    return HeadCheck(
        weight_type=weight_type,
        tensor=tensor,
        claim=(quantized or claims or [None])[0],
        quantization_seen=head.get("quantization"),
        contradiction=contradiction,
        unchecked=unchecked,
    )
