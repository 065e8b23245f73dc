"""Implementation choices that decide which tensors autograd keeps for backward.

Every choice is an explicit option (an enum or a bool) whose default is what a user of
Megatron-Core with Transformer Engine (TE) on H100 in BF16 gets; each field's docstring says why.
The resolved values are echoed into every result row, so a number always says what it assumed.
"""

from __future__ import annotations

import math

from msgspec import Struct
from msgspec.structs import force_setattr

from tpcalc.choices import AttentionKernel, Recompute, RouterDtype, SoftmaxDtype
from tpcalc.errors import InputError
from tpcalc.specs import ModelSpec
from tpcalc.terms import Scalar
from tpcalc.units import Dtype

__all__ = ["ActivationOptions"]

_CHOICES = (
    ("attention", AttentionKernel), ("softmax_dtype", SoftmaxDtype), ("recompute", Recompute),
    ("dtype", Dtype), ("router_dtype", RouterDtype),
)  # fmt: skip


class ActivationOptions(Struct, frozen=True, kw_only=True):
    """What the exact activation model assumes about kernels, fusion, recompute and layout.

    Defaults are a Megatron-Core + Transformer Engine run on H100 in BF16:

    - ``attention=flash``: TE picks cuDNN fused attention or FlashAttention on Hopper; both keep
      q, k, v, O and the softmax statistics, never the s x s matrix.
    - ``softmax_dtype=bf16``: only matters for eager attention (Megatron's fused softmax).
    - ``dropout=None``: resolved from the model: GPT-style models (LayerNorm, GeLU 4h MLP) trained
      with dropout 0.1 as GPT-3 and Korthikanti et al. did; Llama/Qwen/DeepSeek recipes use
      ``attention_dropout=0`` and ``hidden_dropout=0``, so nothing is kept.
    - ``fused_norm=True``: TE's LayerNorm/RMSNorm kernels keep the bf16 input and fp32 per-token
      statistics (mean and 1/sigma, or 1/rms). ``False`` is Hugging Face's fp32 RMSNorm written
      with PyTorch primitives, which keeps an fp32 copy of the input and the normalised bf16 tensor.
    - ``fused_swiglu=True``: Megatron's ``bias_swiglu_impl`` keeps only the fc1 output [gate, up];
      ``False`` also keeps silu(gate).
    - ``recompute=none``: Megatron's default (``--recompute-granularity`` unset).
    - ``sequence_parallel=True``: Megatron recommends it whenever t > 1 (Korthikanti et al.
      §4.2.2; it moves the same bytes as TP alone) and MoE with TP requires it.
    - ``t=1, cp=1``: one rank, no context parallelism.
    - ``dtype=bf16``: the 16-bit activations both seeds and the paper assume.
    """

    attention: AttentionKernel = AttentionKernel.flash
    softmax_dtype: SoftmaxDtype = SoftmaxDtype.bf16
    dropout: bool | None = None
    fused_norm: bool = True
    fused_swiglu: bool = True
    recompute: Recompute = Recompute.none
    sequence_parallel: bool = True
    t: int = 1
    cp: int = 1
    dtype: Dtype = Dtype.bf16
    # Memory techniques (tpcalc.calc.activations.exact.techniques), off by default except
    # moe_probs_in_act, which today's Megatron-Core always does:
    recompute_modules: tuple[str, ...] = ()  # Megatron recompute_modules, on top of ``recompute``
    fp8_cache: bool = False  # DeepSeek-V3 §3.3: Linear inputs and SwiGLU input kept in FP8
    fp8_linear_inputs: bool = False  # Transformer Engine FP8: each Linear keeps its FP8 input
    moe_probs_in_act: bool = True  # Megatron-Core activation_func_with_probs (core_v0.13.0+)
    router_dtype: RouterDtype = RouterDtype.fp32  # router scores and top-k probabilities
    capacity_factor: float | None = None  # expert capacity with dropping/padding (off)

    def __post_init__(self) -> None:
        # The Python API takes a choice by its value too (recompute="selective").
        for name, choice in _CHOICES:
            force_setattr(self, name, choice(getattr(self, name)))
        force_setattr(self, "recompute_modules", tuple(self.recompute_modules))
        for name, value in (("t", self.t), ("cp", self.cp)):
            if value < 1:
                raise InputError(f"{name}={value} must be a positive integer")
        check_capacity_factor(self.capacity_factor)

    def resolved_dropout(self, spec: ModelSpec) -> bool:
        """The option when set; else what the model's config states (``tpcalc.dropout``, e.g.
        Nemotron's launcher configs train without dropout); else on for GPT-style models
        (LayerNorm, non-gated MLP) and off for Llama-style."""
        return model_dropout(spec, self.dropout)

    def sp(self) -> bool:
        """Sequence parallelism only means something when t > 1."""
        return self.sequence_parallel and self.t > 1

    def echo(self, spec: ModelSpec) -> dict[str, Scalar]:
        """The resolved choices, for a result row's inputs."""
        return {
            "attention": self.attention.value,
            "softmax_dtype": self.softmax_dtype.value,
            "dropout": self.resolved_dropout(spec),
            "fused_norm": self.fused_norm,
            "fused_swiglu": self.fused_swiglu,
            "recompute": self.recompute.value,
            "sp": self.sp(),
            "t": self.t,
            "cp": self.cp,
            "activation_dtype": self.dtype.value,
            "recompute_modules": ",".join(self.recompute_modules) or "none",
            "fp8_cache": self.fp8_cache,
            "fp8_linear_inputs": self.fp8_linear_inputs,
            "moe_probs_in_act": self.moe_probs_in_act,
            "router_dtype": self.router_dtype.value,
            "capacity_factor": "none" if self.capacity_factor is None else self.capacity_factor,
        }


def check_capacity_factor(capacity_factor: float | None) -> None:
    """An expert capacity factor is off (None) or a positive, finite number of token slots per
    routed copy (Megatron --moe-expert-capacity-factor); anything else is refused in one line."""
    if capacity_factor is not None and not 0 < capacity_factor < math.inf:
        raise InputError(
            f"capacity_factor={capacity_factor} must be a positive finite number (e.g. 1.0)"
        )


def model_dropout(spec: ModelSpec, dropout: bool | None) -> bool:
    """Whether a run trains with dropout: ``dropout`` when set (--dropout/--no-dropout); else
    what the model's config states (``tpcalc.dropout``, e.g. Nemotron's launcher configs train
    without it); else on for GPT-style models (LayerNorm, non-gated MLP: GPT-2/3 and Megatron's
    GPT default hidden and attention dropout 0.1) and off for Llama-style."""
    if dropout is not None:
        return dropout
    if spec.tpcalc.dropout is not None:
        return spec.tpcalc.dropout
    return spec.uses_layernorm or not spec.gated_mlp
