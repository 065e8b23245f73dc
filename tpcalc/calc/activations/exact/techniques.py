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
- Router probabilities applied inside the expert activation, ``moe_probs_in_act``
  (Megatron-Core ``experts.py`` ``activation_func_with_probs``: SwiGLU(fc1)·probs before fc2, so
  the token combine keeps no expert output; the default ``False`` is the combine-side weighting
  that keeps it).
"""

from __future__ import annotations

from tpcalc.calc.activations.exact.records import SavedDtype, TensorRecord
from tpcalc.errors import InputError

RECOMPUTE_MODULES = (
    "core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts",
)  # fmt: skip
SRC_RECOMPUTE_MODULES = "Megatron-LM transformer_config.py recompute_modules (selective)"
SRC_FP8_CACHE = "DeepSeek-V3 report §3.3.2-3.3.3: Linear inputs and SwiGLU input cached in FP8"
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
                  ".fc2_input", ".gelu_input", ".in_proj_input", ".out_proj_input")  # fmt: skip


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


def apply_techniques(
    records: list[TensorRecord],
    *,
    modules: frozenset[str],
    fp8_cache: bool,
    probs_in_act: bool,
    mla: bool,
) -> list[TensorRecord]:
    """The inventory after the recompute modules, FP8 caching and in-activation probabilities."""
    out = []
    for r in records:
        if _recomputed(r, modules, mla):
            continue
        if probs_in_act and r.name == "moe.expert_output":
            continue
        if fp8_cache and r.name.endswith(_LINEAR_INPUTS) and r.dtype.bytes > 1:
            fp8 = SavedDtype.fp8
            r = r.model_copy(
                update={"dtype": fp8, "bytes": r.bytes // r.dtype.bytes * fp8.bytes,
                        "note": f"{r.note}; FP8 cache".lstrip("; ")}
            )  # fmt: skip
        out.append(r)
    return out
