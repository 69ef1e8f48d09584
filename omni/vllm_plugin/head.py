"""The output head as vLLM loaded it, reported by the process that loads it.

The claim that a head is quantized (an arm's ``int4_lm_head``, a checkpoint's
``quantization_config``) says nothing about what the loader did: the
retracted W4A8 checkpoint claimed a quantized head and ran a bf16 one. So the
model loader's ``load_model`` is wrapped (where its module loads: the worker,
after ``process_weights_after_loading`` has swapped in quantized weights) to
write down the head's quant method and weight type, for omni's dense-head
rule (omni.measure.heads) to set against the claims.
"""

from __future__ import annotations

import json
import os

from omni.vllm_plugin.names import HEAD_VAR
from omni.vllm_plugin.patch import when_imported

LOADER_MODULE = "vllm.model_executor.model_loader.base_loader"
MARK = "_omni_head_reported"


def describe_head(model, quantization: str | None) -> dict:
    """``lm_head``'s quant method and weight type. An unquantized method runs
    the weight as it is, so its torch dtype is the type; a quantized method
    replaced the weight, so its quantization's name is. Tied embeddings share
    ``embed_tokens``' weight, and are named so."""
    head = getattr(model, "lm_head", None)
    if head is None:
        return {"tensor": None, "weight_type": None, "method": None, "quantization": quantization}
    method = getattr(head, "quant_method", None)
    method_name = type(method).__name__ if method is not None else None
    weight = getattr(head, "weight", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    tied = weight is not None and weight is getattr(embed, "weight", None)
    if method is None or method_name.startswith("Unquantized"):
        weight_type = str(weight.dtype).removeprefix("torch.") if weight is not None else None
    else:
        config = getattr(method, "config", None) or getattr(method, "quant_config", None)
        weight_type = config.get_name() if hasattr(config, "get_name") else method_name
    return {
        "tensor": "model.embed_tokens (tied)" if tied else "lm_head",
        "weight_type": weight_type,
        "method": method_name,
        "quantization": quantization,
    }


def _quantization_of(args, kwargs) -> str | None:
    for value in (*args, *kwargs.values()):
        config = getattr(value, "model_config", value)
        if hasattr(config, "quantization"):
            return config.quantization
    return None


def _wrap_load_model(module) -> None:
    loader = module.BaseModelLoader
    original = loader.load_model
    if getattr(original, MARK, False):
        return

    def load_model(self, *args, **kwargs):
        model = original(self, *args, **kwargs)
        path = os.environ.get(HEAD_VAR)
        if path:
            report = describe_head(model, _quantization_of(args, kwargs))
            with open(path, "w") as f:
                json.dump(report, f, sort_keys=True)
        return model

    setattr(load_model, MARK, True)
    loader.load_model = load_model


def report_head_from_env() -> None:
    """Arm the report in every process when the engine asked for it."""
    if os.environ.get(HEAD_VAR):
        when_imported(LOADER_MODULE, _wrap_load_model)
