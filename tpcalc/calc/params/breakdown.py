"""The parameter breakdown ``tpcalc show`` prints: parts of the total, then the matmul and
active counts, each with its formula, inputs and source (counts from
``tpcalc.calc.params.counts``)."""

from __future__ import annotations

from tpcalc.calc.params.counts import (
    active_params,
    attention_params,
    embedding_params,
    final_norm_params,
    linear_attention_params,
    lm_head_params,
    matmul_params,
    mtp_params,
    shared_expert_intermediate,
    summed_layer_parts,
)
from tpcalc.specs import ModelSpec
from tpcalc.terms import Term, Unit, term

SRC_ATTN = (
    "transformers LlamaAttention q/k/v/o shapes (GQA: Ainslie et al. 2023); Qwen2 qkv bias; "
    "Qwen3 q_norm/k_norm; Qwen3-Next/Qwen3.5 attn_output_gate doubles q_proj"
)
SRC_MLA = "DeepSeek-V3 report (arXiv 2412.19437) §2.1.1 eqs. 1-11; transformers DeepseekV3Attention"
SRC_DELTANET = "Gated DeltaNet (arXiv 2412.06464); transformers Qwen3_5GatedDeltaNet shapes"
SRC_MLP = "SwiGLU (arXiv 2002.05202) gate/up/down; GPT 4h MLP (Megatron, arXiv 2104.04473 eq. 2)"
SRC_MOE = "DeepSeek-V3 §2.1.2 (routed + shared experts, gate with bias); Mixtral arXiv 2401.04088"
SRC_EMB = "Megatron (Narayanan et al. 2021, arXiv 2104.04473) eq. 2: V·h embedding and output layer"
SRC_MTP = (
    "DeepSeek-V3 §2.2 (MTP module: norms, projection, one block; embedding and head shared); "
    "Qwen3.5 mtp.fc / pre_fc_norm_* / layers.0 / norm"
)
SRC_MATMUL = (
    "seed 000 §张量并行: 6 × 25,624,600,064 × 4,096, only matmul parameters "
    "(drop the lookup-only embedding, the vision tower and MTP)"
)


def param_terms(spec: ModelSpec) -> tuple[Term, ...]:
    """The breakdown: parts with ``part_of="total_params"``, the total, then matmul and active
    counts (not parts). Each term carries its own formula, inputs and source."""
    s, h, V = summed_layer_parts(spec), spec.hidden_size, spec.vocab_size
    L_moe, E = spec.moe_layers, spec.n_routed_experts or 0
    L_lin = spec.linear_attention_layers
    # (key, label, value, formula, source, inputs)
    # fmt: off
    rows: list[tuple[str, str, int, str, str, dict]] = [
        ("embedding", "input embedding", embedding_params(spec), "V·h", SRC_EMB, {"V": V, "h": h}),
        ("full_attention", "full-attention blocks", s["full_attention"], "L_full · P_attn",
         SRC_MLA if spec.is_mla else SRC_ATTN,
         {"L_full": spec.full_attention_layers, "P_attn": attention_params(spec)}),
        ("linear_attention", "linear-attention blocks", s["linear_attention"],
         "L_linear · P_linear", SRC_DELTANET,
         {"L_linear": L_lin, "P_linear": linear_attention_params(spec) if L_lin else 0}),
        ("dense_mlp", "dense MLPs", s["dense_mlp"], "L_dense · P_mlp(I)", SRC_MLP,
         {"L_dense": spec.dense_layers, "I": spec.intermediate_size, "gated": spec.gated_mlp}),
        ("routed_expert", "routed experts", s["routed_expert"], "L_moe · E · P_mlp(I_moe)", SRC_MOE,
         {"L_moe": L_moe, "E": E, "I_moe": spec.moe_intermediate_size or 0}),
        ("shared_expert", "shared experts", s["shared_expert"], "L_moe · P_mlp(I_shared)", SRC_MOE,
         {"L_moe": L_moe, "I_shared": shared_expert_intermediate(spec)}),
        ("router", "routers", s["router"], "L_moe · E · (h + bias)", SRC_MOE,
         {"L_moe": L_moe, "E": E, "h": h, "bias": int(spec.router_bias)}),
        ("norm", "layer norms", s["norm"], "L · 2 · norm(h)", SRC_ATTN,
         {"L": spec.num_hidden_layers, "h": h, "layernorm": spec.uses_layernorm}),
        ("final_norm", "final norm", final_norm_params(spec), "norm(h)", SRC_ATTN, {"h": h}),
        ("lm_head", "LM head", lm_head_params(spec), "0 if tied else V·h", SRC_EMB,
         {"V": V, "h": h, "tied": spec.tie_word_embeddings}),
        ("mtp", "MTP modules", mtp_params(spec), "n_mtp · (2h·h + 3·norm(h) + P_layer)", SRC_MTP,
         {"n_mtp": spec.mtp_layers, "h": h}),
    ]
    rows += [
        (d.name, f"{d.name.replace('_', ' ')} (declared)", d.params, "declared", d.source, {})
        for d in spec.tpcalc.declared_parts
    ]
    parts = [term(f"{k}_params", lbl, v, Unit.params, formula=f, source=src,
                  part_of="total_params", **inp) for k, lbl, v, f, src, inp in rows]
    return (
        *parts,
        term("total_params", "total", sum(r[2] for r in rows), Unit.params,
             formula="sum of the parts", source="sum of the terms above"),
        term("matmul_params", "matmul parameters", matmul_params(spec), Unit.params,
             formula="decoder layers + final norm + V·h", source=SRC_MATMUL),
        term("active_params", "active per token", active_params(spec), Unit.params,
             formula="total − MTP − declared − L_moe·(E − k)·P_mlp(I_moe)", source=SRC_MOE,
             L_moe=L_moe, E=E, k=spec.num_experts_per_tok or 0),
    )
