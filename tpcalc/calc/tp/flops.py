"""Per-rank training FLOPs and compute time under tensor parallelism.

6·N·tokens: forward 2N and backward 4N FLOP per token (Kaplan et al. 2020 §2.1; Narayanan et al.
2021 §5.1). Which N is an explicit convention: seed 003 §7.3.5 (table 7-7) uses all parameters,
seed 000 uses "matmul" parameters. The optional attention-score term is the s² part of
Narayanan et al. 2021 Eq. 3, 96·B·s·l·h²·(s/6h), which counts the recompute forward too;
without it (3 passes, not 4) 72·B·s·l·h²·(s/6h) = 12·B·s²·l·h (QKᵀ and score·V, fwd + bwd),
as Megatron-LM training.py num_floating_point_operations counts it (the s/h term).
"""

from __future__ import annotations

from tpcalc.calc.params.counts import ParamConvention, params_for
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Term, Unit, term

FLOP_PER_PARAM_TOKEN_FWD = 2  # one multiply-add per weight per token
FLOP_PER_PARAM_TOKEN_BWD = 4  # grads w.r.t. inputs and weights: twice the forward
ATTN_SCORE_FLOP_COEFF = 12  # 4·s²·h forward (QKᵀ, A·V) × 3 passes (Narayanan Eq. 3 has × 4)

SRC_6N = "Kaplan et al. 2020 §2.1; Narayanan et al. 2021 §5.1; seed 003 §7.3.5 table 7-7"


def attention_score_flop(spec: ModelSpec, *, seq: int, micro_batch: int) -> int:
    """12·b·s²·(n_heads·head_dim)·L_full: QKᵀ and scores·V, forward + backward, no causal skip.

    Source: Narayanan et al. 2021 Eq. 3 (the s/(6h) term), with h replaced by the query width
    n_heads·head_dim (they differ when head_dim ≠ h/n_heads) and only full-attention layers of a
    hybrid model counted (linear attention has no s² term).
    """
    width = spec.num_attention_heads * spec.head_dim_resolved
    return ATTN_SCORE_FLOP_COEFF * micro_batch * seq**2 * width * spec.full_attention_layers


def flops_terms(
    spec: ModelSpec,
    hw: HardwareSpec,
    *,
    t: int,
    seq: int,
    micro_batch: int,
    params: ParamConvention,
    attention: bool = False,
) -> tuple[Term, ...]:
    """Per-rank FLOPs of one micro-batch forward + backward, and its time at achieved FLOP/s."""
    n = params_for(spec, params)
    tokens = seq * micro_batch
    achieved = hw.achieved_flop_per_s.value
    dense = (FLOP_PER_PARAM_TOKEN_FWD + FLOP_PER_PARAM_TOKEN_BWD) * n * tokens / t
    attn = attention_score_flop(spec, seq=seq, micro_batch=micro_batch) / t if attention else 0.0
    total = dense + attn
    fwd_share = FLOP_PER_PARAM_TOKEN_FWD / (FLOP_PER_PARAM_TOKEN_FWD + FLOP_PER_PARAM_TOKEN_BWD)
    out = [
        term(
            "n_params",
            f"N ({params.value})",
            n,
            Unit.params,
            formula=f"parameters counted as '{params.value}'",
            source=params_source(params),
        ),
        term("tokens", "tokens", tokens, Unit.count, formula="s·b", s=seq, b=micro_batch),
        term(
            "dense_flop_per_rank",
            "6N·tokens/t",
            dense,
            Unit.flop,
            formula="6·N·s·b/t",
            source=SRC_6N,
            part_of="flop_per_rank",
            N=n,
            s=seq,
            b=micro_batch,
            t=t,
        ),
    ]
    if attention:
        out.append(
            term(
                "attention_flop_per_rank",
                "attention s² /t",
                attn,
                Unit.flop,
                formula="12·b·s²·(n_h·d_h)·L_full/t",
                source="Narayanan et al. 2021 Eq. 3 (s/6h term) without the recompute pass",
                part_of="flop_per_rank",
                b=micro_batch,
                s=seq,
                n_h=spec.num_attention_heads,
                d_h=spec.head_dim_resolved,
                L_full=spec.full_attention_layers,
                t=t,
            )
        )
    out += [
        term(
            "flop_per_rank",
            "FLOP per rank",
            total,
            Unit.flop,
            formula="sum of the parts above",
            source=SRC_6N,
        ),
        term(
            "forward_flop_per_rank",
            "forward",
            total * fwd_share,
            Unit.flop,
            formula="2/6 of the total",
            source=SRC_6N,
        ),
        term(
            "backward_flop_per_rank",
            "backward",
            total * (1 - fwd_share),
            Unit.flop,
            formula="4/6 of the total (seed 000: backward = 4·N·tokens)",
            source=SRC_6N,
        ),
        term(
            "achieved_flop_per_s",
            "achieved",
            achieved,
            Unit.flop_per_s,
            formula="hardware config",
            source=hw.achieved_flop_per_s.source,
        ),
        term(
            "compute_time_s",
            "compute time",
            total / achieved,
            Unit.seconds,
            formula="FLOP per rank / achieved FLOP/s",
            source="seed 003 §7.3.5 table 7-7",
            flop=total,
            achieved=achieved,
        ),
        term(
            "backward_time_s",
            "backward time",
            total * (1 - fwd_share) / achieved,
            Unit.seconds,
            formula="backward FLOP per rank / achieved FLOP/s",
            source="seed 000 (DP vs backward: 1.05 s)",
        ),
    ]
    return tuple(out)


def params_source(params: ParamConvention) -> str:
    """Which seed uses this parameter convention (the source shown for N)."""
    if params is ParamConvention.all:
        return "seed 003 §7.3.5: 6 × 705.5 亿 counts every parameter"
    return "seed 000: matmul parameters (no input embedding, vision tower or MTP)"
