"""Gated DeltaNet linear attention (Qwen3-Next / Qwen3.5 ``linear_attention`` layers), per rank.

Modelled, not measured: the layer follows Hugging Face ``Qwen3NextGatedDeltaNet`` with the
flash-linear-attention kernels (fla ``ChunkGatedDeltaRuleFunction``, ``causal_conv1d_fn``,
``FusedRMSNormGated``); TP splits key and value heads by t. What each step keeps:
- in_proj_qkv / in_proj_z / in_proj_b / in_proj_a: their input, the norm output (shared).
- causal depthwise conv1d with fused SiLU: its input, the qkv projection output [2·Dk + Dv].
- q and k are repeated from the key heads to the value heads, then the chunked delta rule keeps
  ``(q, q_rstd, k, k_rstd, v, g, beta, A)``: L2-normalised q and k, fp32 1/norms, v, the fp32
  chunk-local cumulative decay g, beta, and the per-chunk WY matrix A [tokens, heads, 64];
  hidden states are recomputed in backward (fla ``chunk_gated_delta_rule_bwd``).
- decay g = -exp(A_log) · softplus(a + dt_bias) in fp32: softplus keeps its input, the
  multiply keeps softplus's output; beta = sigmoid(b) keeps its output (the same tensor the
  kernel keeps).
- gated RMSNorm(o) · silu(z): keeps o, z and the fp32 1/rms; the output projection keeps its
  input.
"""

from __future__ import annotations

from tpcalc.calc.activations.exact.norms import dropout_mask, norm_output
from tpcalc.calc.activations.exact.records import Layout, SavedDtype, TensorRecord, rec
from tpcalc.specs import ModelSpec

PART = "linear_attention"
FLA_CHUNK_SIZE = 64  # fla chunk_gated_delta_rule chunk length: A is [tokens, heads, 64]


def gated_deltanet_records(spec: ModelSpec, lay: Layout, dropout: bool) -> list[TensorRecord]:
    """Tensors one Gated DeltaNet layer keeps on one rank (sources in the module docstring)."""
    hk = lay.heads(spec.linear_num_key_heads or 0, "linear_num_key_heads")
    hv = lay.heads(spec.linear_num_value_heads or 0, "linear_num_value_heads")
    dk, dv = spec.linear_key_head_dim or 0, spec.linear_value_head_dim or 0
    n, b, act, fp32, tp = lay.tokens, lay.b, lay.act, SavedDtype.fp32, lay.tp_split
    per_head = (n, b, hv)

    def r(name: str, shape: tuple[int, ...], dtype: SavedDtype, note: str) -> TensorRecord:
        return rec(f"{PART}.{name}", PART, shape, dtype, tp, note=note)

    out = [
        norm_output(f"{PART}.in_proj_input", PART, lay, spec.hidden_size),
        r("conv_input", (n, b, 2 * hk * dk + hv * dv), act, "qkv projection output"),
        r("q", (n, b, hv, dk), act, "L2-normalised q, repeated to value heads"),
        r("q_rstd", per_head, fp32, "fp32 1/||q||"),
        r("k", (n, b, hv, dk), act, "L2-normalised k, repeated to value heads"),
        r("k_rstd", per_head, fp32, "fp32 1/||k||"),
        r("v", (n, b, hv, dv), act, "value"),
        r("g_cumsum", per_head, fp32, "chunk-local cumulative log decay"),
        r("beta", per_head, act, "sigmoid(b)"),
        r("wy_A", (n, b, hv, FLA_CHUNK_SIZE), act, "per-chunk WY matrix"),
        r("softplus_input", per_head, fp32, "a + dt_bias"),
        r("softplus_out", per_head, fp32, "kept by the decay multiply"),
        r("norm_input", (n, b, hv, dv), act, "delta-rule output o"),
        r("gate_z", (n, b, hv, dv), act, "z for silu(z)"),
        r("norm_rstd", per_head, fp32, "fp32 1/rms of o"),
        r("out_proj_input", (n, b, hv * dv), act, "gated norm output"),
    ]
    if dropout:
        out.append(dropout_mask(f"{PART}.dropout_mask", PART, lay, spec.hidden_size))
    return out
