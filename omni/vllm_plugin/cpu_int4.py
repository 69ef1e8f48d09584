"""``cpu_int4``: int4 weights with per-group scales and zero points, executed by
torch's packed-int4 CPU matmul (``aten._weight_int4pack_mm_for_cpu``).

Weights load as bf16 from an ordinary checkpoint and are quantized in
``process_weights_after_loading`` (asymmetric, groups of 32/64/128 along the
input dimension, the gpt-fast/torchao layout: q in 0..15,
w = (q - 8) * scale + zero). The output head stays bf16 unless
``lm_head_bf16`` is false, and any module named in ``modules_to_not_convert``
stays bf16 whatever else the config says. The head as loaded is reported
(omni.vllm_plugin.head) and checked against every claim, because a W4 run
whose head was quietly left in bf16 once had to be retracted.
``OMNI_FAULT_INT4_HEAD=bf16`` (a test-only fault, set in an arm's ``env:``)
does exactly that behind the arm's back, for omni's bf16-head rule to catch.

Selected with ``quantization: cpu_int4`` and the arm's ``params.int4_group_size``
/ ``params.int4_lm_head``, passed to vLLM as the model's quantization_config.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
from vllm.model_executor.layers.quantization import register_quantization_config
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

from omni.vllm_plugin.names import FAULT_HEAD_VAR

GROUP_SIZES = (32, 64, 128)
INNER_K_TILES = 2  # torch CPU kernel's packing granularity (K must divide by 16 * tiles)


def quantize_groups(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 [N, K] -> (int32 q in 0..15 [N, K], scales_and_zeros bf16 [K/group, N, 2])."""
    n, k = weight.shape
    w = weight.float().reshape(n, k // group_size, group_size)
    lo, hi = w.amin(dim=2, keepdim=True), w.amax(dim=2, keepdim=True)
    scales = ((hi - lo).clamp(min=1e-6) / 15).squeeze(2)
    zeros = lo.squeeze(2) + scales * 8
    q = torch.round((w - lo) / scales.unsqueeze(2)).clamp(0, 15).to(torch.int32).reshape(n, k)
    scales_and_zeros = torch.stack([scales, zeros], dim=2).transpose(0, 1).contiguous().to(torch.bfloat16)
    return q, scales_and_zeros


class CpuInt4LinearMethod(UnquantizedLinearMethod):
    """Loads bf16 like an unquantized layer, then swaps in packed int4."""

    def __init__(self, config: CpuInt4Config) -> None:
        super().__init__()
        self.config = config

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        weight = layer.weight.data
        group = self.config.group_size
        if weight.shape[1] % group:
            raise ValueError(f"cpu_int4: input size {weight.shape[1]} not divisible by group size {group}")
        q, scales_and_zeros = quantize_groups(weight, group)
        layer.int4_weight = torch.nn.Parameter(
            torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, INNER_K_TILES), requires_grad=False
        )
        layer.int4_scales_and_zeros = torch.nn.Parameter(scales_and_zeros, requires_grad=False)
        layer.int4_out_features = weight.shape[0]
        del layer.weight  # the bf16 copy goes: this is where the memory is saved

    def apply(self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        shape = x.shape
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.reshape(-1, shape[-1]).to(torch.bfloat16),
            layer.int4_weight,
            self.config.group_size,
            layer.int4_scales_and_zeros,
        )
        out = out.reshape(*shape[:-1], layer.int4_out_features).to(x.dtype)
        return out + bias if bias is not None else out


@register_quantization_config("cpu_int4")
class CpuInt4Config(QuantizationConfig):
    def __init__(
        self, group_size: int = 128, lm_head_bf16: bool = True, modules_to_not_convert: list[str] | None = None
    ) -> None:
        super().__init__()
        if group_size not in GROUP_SIZES:
            raise ValueError(f"cpu_int4 group_size must be one of {GROUP_SIZES}, got {group_size}")
        self.group_size, self.lm_head_bf16 = group_size, lm_head_bf16
        self.modules_to_not_convert = list(modules_to_not_convert or [])

    def get_name(self) -> str:
        return "cpu_int4"

    @classmethod
    def get_supported_act_dtypes(cls) -> list[torch.dtype]:
        return [torch.bfloat16]

    @classmethod
    def get_min_capability(cls) -> int:
        return -1  # CPU only: no CUDA capability applies

    @staticmethod
    def get_config_filenames() -> list[str]:
        return []

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> CpuInt4Config:
        return cls(
            int(config.get("group_size", 128)),
            bool(config.get("lm_head_bf16", True)),
            config.get("modules_to_not_convert"),
        )

    def skipped(self, prefix: str) -> bool:
        """A module the checkpoint keeps unquantized (HF's ``modules_to_not_convert``,
        by name or dotted prefix), whatever else its config says: loaders honour
        the skip list, which is how a head claimed quantized can load dense."""
        return any(prefix == m or prefix.startswith(m + ".") for m in self.modules_to_not_convert)

    def get_quant_method(self, layer: torch.nn.Module, prefix: str):
        if isinstance(layer, ParallelLMHead):
            bf16_head = self.lm_head_bf16 or os.environ.get(FAULT_HEAD_VAR) == "bf16"  # the fault: a lie
            return None if bf16_head or self.skipped(prefix) else CpuInt4LinearMethod(self)
        if isinstance(layer, LinearBase):
            return UnquantizedLinearMethod() if self.skipped(prefix) else CpuInt4LinearMethod(self)
        return None
