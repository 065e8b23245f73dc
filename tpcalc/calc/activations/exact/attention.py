"""Full softmax attention (MHA, GQA, Qwen's q/k norm and output gate) and MLA, per rank.

Order of a pre-norm attention block: norm -> QKV projection (keeps the norm output) ->
[q/k RMSNorm per head] -> RoPE -> core attention -> [O x sigmoid(gate)] -> output projection
(keeps its input) -> [dropout] -> residual add.
RoPE is TE's fused kernel (Megatron default ``apply_rope_fusion``): it keeps only the fp32
frequency table, shared by all layers (``shared_tensors``), not q or k.
MLA follows Megatron-Core ``MLASelfAttention`` (DeepSeek-V2 §2.1.2): the down-projections and the
latent norms run on every TP rank (replicated weights) over the s/cp tokens; the up-projections
are split by heads.
"""

from __future__ import annotations

from tpcalc.calc.activations.exact.core_attention import core_attention_records
from tpcalc.calc.activations.exact.norms import dropout_mask, norm_output, norm_records
from tpcalc.calc.activations.exact.options import ActivationOptions
from tpcalc.calc.activations.exact.records import Layout, TensorRecord, rec
from tpcalc.specs import ModelSpec

PART = "attention"


def _head_norm(name: str, lay: Layout, heads: int, dim: int, fused: bool) -> list[TensorRecord]:
    shape = (lay.tokens, lay.b, heads, dim)
    return norm_records(name, PART, shape, lay.tp_split, lay.act, layernorm=False, fused=fused)


def full_attention_records(
    spec: ModelSpec, lay: Layout, opts: ActivationOptions, dropout: bool
) -> list[TensorRecord]:
    """MHA / GQA with optional per-head q/k RMSNorm and sigmoid output gate."""
    d = spec.head_dim_resolved
    a_l = lay.heads(spec.num_attention_heads, "num_attention_heads")
    g_l = lay.kv_heads(spec.kv_heads)
    out = [norm_output(f"{PART}.qkv_input", PART, lay, spec.hidden_size)]
    if spec.uses_qk_norm:
        out += _head_norm(f"{PART}.q_norm", lay, a_l, d, opts.fused_norm)
        out += _head_norm(f"{PART}.k_norm", lay, g_l, d, opts.fused_norm)
    out += core_attention_records(
        PART, lay, opts, heads=a_l, kv_heads=g_l, qk_dim=d, v_dim=d, dropout=dropout
    )
    if spec.attn_output_gate:
        shape = (lay.tokens, lay.b, a_l * d)
        out += [
            rec(f"{PART}.gate_sigmoid", PART, shape, lay.act, lay.tp_split, note="sigmoid(gate)"),
            rec(f"{PART}.gated_out", PART, shape, lay.act, lay.tp_split, note="o_proj input"),
        ]
    if dropout:
        out.append(dropout_mask(f"{PART}.dropout_mask", PART, lay, spec.hidden_size))
    return out


def mla_records(
    spec: ModelSpec, lay: Layout, opts: ActivationOptions, dropout: bool
) -> list[TensorRecord]:
    """Multi-head latent attention (DeepSeek-V2/V3) as Megatron-Core builds it."""
    a_l = lay.heads(spec.num_attention_heads, "num_attention_heads")
    qk_dim = spec.head_dim_resolved  # qk_nope_head_dim + qk_rope_head_dim
    v_dim = spec.v_head_dim or qk_dim
    out = [norm_output(f"{PART}.qkv_input", PART, lay, spec.hidden_size)]
    latents = [("kv", spec.kv_lora_rank or 0)]
    if spec.q_lora_rank:
        latents.insert(0, ("q", spec.q_lora_rank))
    for name, rank in latents:
        shape = (lay.tokens, lay.b, rank)
        split = lay.replicated_split
        out += norm_records(
            f"{PART}.{name}_latent_norm", PART, shape, split, lay.act,
            layernorm=False, fused=opts.fused_norm,
        )  # fmt: skip
        out.append(rec(f"{PART}.{name}_up_input", PART, shape, lay.act, split, note="latent"))
    out += core_attention_records(
        PART, lay, opts, heads=a_l, kv_heads=a_l, qk_dim=qk_dim, v_dim=v_dim, dropout=dropout
    )
    if dropout:
        out.append(dropout_mask(f"{PART}.dropout_mask", PART, lay, spec.hidden_size))
    return out
