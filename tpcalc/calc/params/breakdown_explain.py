"""Label, formula and source of every ``ParamBreakdown`` field (the explain layer beside
``breakdown.py``), and the terms ``tpcalc show`` prints: parts of the total, then the matmul and
active counts, each with its formula, inputs and source."""

from __future__ import annotations

from tpcalc.calc.params.breakdown import ParamBreakdown, param_breakdown
from tpcalc.calc.params.counts import shared_expert_intermediate
from tpcalc.explain import Explanation, terms
from tpcalc.specs import ModelSpec
from tpcalc.terms import Scalar, Term, Unit, term

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


TOTAL = "total_params"


def explanations(spec: ModelSpec) -> dict[str, Explanation]:
    """The explain table of ``ParamBreakdown`` for ``spec`` (MLA or GQA attention)."""
    return {
        "embedding_params": Explanation("input embedding", Unit.params, "V·h", SRC_EMB, TOTAL),
        "full_attention_params": Explanation(
            "full-attention blocks", Unit.params, "L_full · P_attn",
            SRC_MLA if spec.is_mla else SRC_ATTN, TOTAL,
        ),
        "linear_attention_params": Explanation(
            "linear-attention blocks", Unit.params, "L_linear · P_linear", SRC_DELTANET, TOTAL
        ),
        "dense_mlp_params": Explanation(
            "dense MLPs", Unit.params, "L_dense · P_mlp(I)", SRC_MLP, TOTAL
        ),
        "routed_expert_params": Explanation(
            "routed experts", Unit.params, "L_moe · E · P_mlp(I_moe)", SRC_MOE, TOTAL
        ),
        "shared_expert_params": Explanation(
            "shared experts", Unit.params, "L_moe · P_mlp(I_shared)", SRC_MOE, TOTAL
        ),
        "router_params": Explanation(
            "routers", Unit.params, "L_moe · E · (h + bias)", SRC_MOE, TOTAL
        ),
        "norm_params": Explanation("layer norms", Unit.params, "L · 2 · norm(h)", SRC_ATTN, TOTAL),
        "final_norm_params": Explanation("final norm", Unit.params, "norm(h)", SRC_ATTN, TOTAL),
        "lm_head_params": Explanation(
            "LM head", Unit.params, "0 if tied else V·h", SRC_EMB, TOTAL
        ),
        "mtp_params": Explanation(
            "MTP modules", Unit.params, "n_mtp · (2h·h + 3·norm(h) + P_layer)", SRC_MTP, TOTAL
        ),
        TOTAL: Explanation("total", Unit.params, "sum of the parts", "sum of the terms above"),
        "matmul_params": Explanation(
            "matmul parameters", Unit.params, "decoder layers + final norm + V·h", SRC_MATMUL
        ),
        "active_params": Explanation(
            "active per token", Unit.params,
            "total − MTP − declared − L_moe·(E − k)·P_mlp(I_moe)", SRC_MOE,
        ),
        "attention_block_params": Explanation(
            "P_attn", Unit.params, "one full-attention block", SRC_MLA if spec.is_mla else SRC_ATTN
        ),
        "linear_attention_block_params": Explanation(
            "P_linear", Unit.params, "one linear-attention block (0 without such layers)",
            SRC_DELTANET,
        ),
    }  # fmt: skip


def symbols(b: ParamBreakdown, spec: ModelSpec) -> dict[str, dict[str, Scalar]]:
    """The numbers each formula substitutes."""
    h, V = spec.hidden_size, spec.vocab_size
    L_moe, E = spec.moe_layers, spec.n_routed_experts or 0
    return {
        "embedding_params": {"V": V, "h": h},
        "full_attention_params": {"L_full": spec.full_attention_layers,
                                  "P_attn": b.attention_block_params},
        "linear_attention_params": {"L_linear": spec.linear_attention_layers,
                                    "P_linear": b.linear_attention_block_params},
        "dense_mlp_params": {"L_dense": spec.dense_layers, "I": spec.intermediate_size,
                             "gated": spec.gated_mlp},
        "routed_expert_params": {"L_moe": L_moe, "E": E, "I_moe": spec.moe_intermediate_size or 0},
        "shared_expert_params": {"L_moe": L_moe, "I_shared": shared_expert_intermediate(spec)},
        "router_params": {"L_moe": L_moe, "E": E, "h": h, "bias": int(spec.router_bias)},
        "norm_params": {"L": spec.num_hidden_layers, "h": h, "layernorm": spec.uses_layernorm},
        "final_norm_params": {"h": h},
        "lm_head_params": {"V": V, "h": h, "tied": spec.tie_word_embeddings},
        "mtp_params": {"n_mtp": spec.mtp_layers, "h": h},
        "active_params": {"L_moe": L_moe, "E": E, "k": spec.num_experts_per_tok or 0},
    }  # fmt: skip


def breakdown_terms(b: ParamBreakdown, spec: ModelSpec) -> tuple[Term, ...]:
    """The breakdown: parts with ``part_of="total_params"`` (the declared parts flattened here,
    one term each), the total, then matmul and active counts (not parts)."""
    table, sym = explanations(spec), symbols(b, spec)
    declared = [
        term(f"{d.name}_params", f"{d.name.replace('_', ' ')} (declared)", n, Unit.params,
             formula="declared", source=d.source, part_of=TOTAL)
        for d, n in zip(spec.tpcalc.declared_parts, b.declared_params, strict=True)
    ]  # fmt: skip
    parts = {k: table[k] for k in table if table[k].part_of == TOTAL}
    tail = {k: table[k] for k in (TOTAL, "matmul_params", "active_params")}
    return (*terms(b, parts, symbols=sym), *declared, *terms(b, tail, symbols=sym))


def param_terms(spec: ModelSpec) -> tuple[Term, ...]:
    """``param_breakdown`` of ``spec`` as the terms ``tpcalc show`` prints."""
    return breakdown_terms(param_breakdown(spec), spec)
