"""Memory techniques published runs use, applied to one layer's saved-tensor inventory.

Each technique is an explicit option of ``ActivationOptions`` (default off) and names its source:

- Fine-grained recompute, ``recompute_modules`` (Megatron-LM ``TransformerConfig.
  recompute_modules``, used with ``--recompute-granularity selective``): ``core_attn`` checkpoints
  core attention (q, k, v in, O out stay); ``moe_act`` discards the MoE SwiGLU output (the expert
  fc2 input) and recomputes it from the fc1 output; ``layernorm`` discards the input/pre-MLP norm
  outputs (the linear layers' inputs) and recomputes them from the kept norm input;
  ``mla_up_proj`` discards the MLA up-projection and RoPE outputs (the q, k, v core attention
  reads) and recomputes them from the kept latents; ``mlp`` checkpoints the dense MLP (its input,
  the norm output, stays); ``moe`` checkpoints the whole MoE layer (its input stays);
  ``shared_experts`` checkpoints the shared experts (their input is the MoE input, kept).
  DeepSeek-V3 report §3.2.3 recomputes "all RMSNorm operations and MLA up-projections".
- FP8 activation caching, ``fp8_cache`` (DeepSeek-V3 report §3.3.2-3.3.3, "Low-Precision
  Storage"; Transformer Engine FP8 recipes keep the FP8 cast of a Linear's input for Wgrad):
  every tensor a Linear/grouped GEMM keeps as its input is stored in FP8, 1 byte, and so is the
  SwiGLU input (the fc1 output, "cached in FP8" §3.3.2). The router input stays BF16 (gating
  runs in high precision, §3.3.1) and so does the attention output O (E5M6 in the report;
  counted at BF16 here, the conservative side).
- Transformer Engine FP8 training, ``fp8_linear_inputs``: a TE ``Linear``, ``LayerNormLinear`` or
  ``GroupedLinear`` running an FP8 recipe quantizes its input for the GEMM and saves that FP8
  copy, column-wise only, for the weight gradient (TransformerEngine
  ``transformer_engine/pytorch/module/linear.py`` ``_Linear.forward``: ``saved_inputmat =
  inputmat`` after ``update_usage(rowwise_usage=False, columnwise_usage=True)``;
  ``layernorm_linear.py``: ``ln_out_to_save = ln_out``, the quantized norm output). So every
  Linear input is kept in 1 byte, except where another op keeps the 16-bit tensor too: the
  SwiGLU/GeLU input (the fc1 output) stays 16-bit, kept by the bias-activation function, and
  FlashAttention keeps its output O at 16 bits while the out-projection adds its own FP8 copy.
  The per-block scales of MXFP8 (one byte per 32 elements) are not counted.
- Router probabilities applied inside the expert activation, ``moe_probs_in_act``
  (Megatron-Core ``experts.py`` ``activation_func_with_probs``: SwiGLU(fc1)·probs before fc2, so
  the token combine keeps no expert output). It is the default, since Megatron-Core does so
  unconditionally from core_v0.13.0 (NVIDIA/Megatron-LM 2659630721, "perf(MoE): Memory efficient
  token permutation"); ``False`` is the combine-side weighting of older Megatron-Core, which keeps
  every expert output for d(probs).
"""

from __future__ import annotations

from msgspec.structs import replace

from tpcalc.calc.activations.exact.records import SavedDtype, TensorRecord
from tpcalc.errors import InputError

RECOMPUTE_MODULES = (
    "core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts",
)  # fmt: skip
SRC_RECOMPUTE_MODULES = "Megatron-LM transformer_config.py recompute_modules (selective)"
SRC_FP8_CACHE = "DeepSeek-V3 report §3.3.2-3.3.3: Linear inputs and SwiGLU input cached in FP8"
SRC_FP8_LINEAR_INPUTS = (
    "TransformerEngine module/linear.py _Linear.forward (saved_inputmat, column-wise FP8), "
    "module/layernorm_linear.py (ln_out_to_save)"
)
SRC_PROBS_IN_ACT = "Megatron-Core experts.py activation_func_with_probs (probs inside SwiGLU)"

# Names (suffixes) of the tensors each technique touches, from the inventories in this package.
_NORM_OUTPUTS = (
    ".qkv_input",
    "mlp.fc1_input",
    "moe.input",
    ".in_proj_input",
)  # the linears' norm inputs
_CORE_ATTN_DROPPED = (".softmax_lse", ".rng_state", ".softmax_out", ".softmax_dropout_mask",
                      ".softmax_dropout_out", ".probs_cast")  # fmt: skip
_MLA_UP_OUTPUTS = ("attention.q", "attention.k", "attention.v")
_LINEAR_INPUTS = (".qkv_input", "_up_input", "fc1_input", ".permuted_tokens", ".fc1_output",
                  ".fc2_input", ".gelu_input", ".in_proj_input", ".out_proj_input",
                  ".eh_proj.input")  # fmt: skip
# The inputs an activation function keeps at 16 bits beside the Linear that reads its output.
_ACTIVATION_INPUTS = (".fc1_output", ".gelu_input")
# FlashAttention's output O, which the out-projection reads and quantizes for itself; with a
# gated output (``gated_out``) the projection reads the gated product instead.
_ATTENTION_OUT = "attention.out"
_GATED_OUT = "attention.gated_out"


def check_recompute_modules(modules: tuple[str, ...]) -> None:
    """Raise InputError naming the valid modules when one is unknown."""
    bad = [m for m in modules if m not in RECOMPUTE_MODULES]
    if bad:
        valid = ",".join(RECOMPUTE_MODULES)
        raise InputError(f"--recompute-modules {','.join(bad)}: unknown; use any of {valid}")


def _recomputed(r: TensorRecord, modules: frozenset[str], mla: bool) -> bool:
    """True when ``modules`` makes this tensor recomputed in backward instead of kept."""
    name = r.name
    if "layernorm" in modules and name.endswith(_NORM_OUTPUTS):
        return True
    if "core_attn" in modules and r.part == "attention" and name.endswith(_CORE_ATTN_DROPPED):
        return True
    if "mla_up_proj" in modules and mla and name in _MLA_UP_OUTPUTS:
        return True
    if "moe_act" in modules and name == "moe.experts.fc2_input":
        return True
    if "mlp" in modules and r.part == "mlp" and name != "mlp.fc1_input":
        return True
    if "moe" in modules and r.part == "moe" and name != "moe.input":
        return True
    return "shared_experts" in modules and name.startswith("moe.shared.")


def recomputed_by(r: TensorRecord, module: str, mla: bool) -> bool:
    """True when the one recompute module ``module`` drops ``r`` (rebuilds it in backward)."""
    return _recomputed(r, frozenset((module,)), mla)


def apply_techniques(
    records: list[TensorRecord],
    *,
    modules: frozenset[str],
    fp8_cache: bool,
    probs_in_act: bool,
    mla: bool,
    fp8_linear_inputs: bool = False,
) -> list[TensorRecord]:
    """The inventory after the recompute modules, FP8 caching (DeepSeek-V3's, or Transformer
    Engine's Linear inputs) and in-activation probabilities."""
    out = []
    names = {r.name for r in records}
    for r in records:
        if _recomputed(r, modules, mla):
            continue
        if probs_in_act and r.name == "moe.expert_output":
            continue
        if fp8_cache and r.name.endswith(_LINEAR_INPUTS) and r.dtype.bytes > 1:
            r = _in_fp8(r, "FP8 cache")
        elif fp8_linear_inputs and r.dtype.bytes > 1:
            if r.name.endswith(_LINEAR_INPUTS) and not r.name.endswith(_ACTIVATION_INPUTS):
                r = _in_fp8(r, "TE FP8 input")
            elif r.name == _ATTENTION_OUT and _GATED_OUT not in names:
                out.append(r)
                r = _in_fp8(r, "out-proj's TE FP8 input")
                r = replace(r, name=f"{_ATTENTION_OUT}_fp8", in_paper=False)
        out.append(r)
    return out


def _in_fp8(r: TensorRecord, why: str) -> TensorRecord:
    """``r`` stored at one byte per element, its note saying ``why``."""
    fp8 = SavedDtype.fp8
    return replace(
        r, dtype=fp8, bytes=r.bytes // r.dtype.bytes * fp8.bytes,
        note=f"{r.note}; {why}".lstrip("; "),
    )  # fmt: skip
