"""Per-rank training FLOPs and compute time under tensor parallelism.

6·N·tokens: forward 2N and backward 4N FLOP per token (Kaplan et al. 2020 §2.1; Narayanan et al.
2021 §5.1). Which N is an explicit convention: seed 003 §7.3.5 (table 7-7) uses all parameters,
seed 000 uses "matmul" parameters. The optional attention-score term is the s² part of
Narayanan et al. 2021 Eq. 3, 96·B·s·l·h²·(s/6h), which counts the recompute forward too;
without it (3 passes, not 4) 72·B·s·l·h²·(s/6h) = 12·B·s²·l·h (QKᵀ and score·V, fwd + bwd),
as Megatron-LM training.py num_floating_point_operations counts it (the s/h term).
"""

from __future__ import annotations

from tpcalc.calc.params.counts import (
    active_mtp_params,
    active_params,
    declared_params,
    embedding_params,
    lm_head_matmul_params,
    matmul_params,
    mtp_params,
    total_params,
)
from tpcalc.choices import AttentionFlops, ParamConvention
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Term, Unit, term

FLOP_PER_PARAM_TOKEN_FWD = 2  # one multiply-add per weight per token
FLOP_PER_PARAM_TOKEN_BWD = 4  # grads w.r.t. inputs and weights: twice the forward
ATTN_SCORE_FLOP_COEFF = 12  # 4·s²·h forward (QKᵀ, A·V) × 3 passes (Narayanan Eq. 3 has × 4)

SRC_6N = "Kaplan et al. 2020 §2.1; Narayanan et al. 2021 §5.1; seed 003 §7.3.5 table 7-7"
SRC_ACTIVE = (
    "DeepSeek-V3 report §1 (37B of 671B activated per token): an MoE token multiplies k of the "
    "E routed experts, so 6·N counts the active parameters (tpcalc.calc.params.counts)"
)
SRC_CAUSAL = (
    "Megatron-LM training.py num_floating_point_operations: causal attention computes half the "
    "s² scores (its s/h term carries a factor 1/2 since core_r0.10)"
)
# Gated DeltaNet chunkwise form (Yang et al. 2024, arXiv 2412.06464 §3.3, eqs. 8-9, with the
# UT/WY transform of §3.2): per chunk of C tokens and value head, forward matmuls
#   W·Sᵀ, Q·Sᵀ, Kᵀ·(U − W·Sᵀ)          3 × 2·C·d_k·d_v   (inter-chunk, state)
#   Q·Kᵀ, K·Kᵀ, T·(βK)                  3 × 2·C²·d_k      (intra-chunk, T = (I + A)⁻¹)
#   (QKᵀ ⊙ M)·(U − W·Sᵀ), T·(βV)        2 × 2·C²·d_v
#   (I + A)⁻¹ by forward substitution   C³/3 multiply-adds = 2·C³/3 FLOP
DELTANET_STATE_MATMULS = 3
DELTANET_INTRA_K_MATMULS = 3
DELTANET_INTRA_V_MATMULS = 2
TRIANGULAR_SOLVE_DIVISOR = 3  # C³/3 multiply-adds for a triangular inverse
FLOP_PER_MAC = 2
PASSES_FWD_BWD = 3  # backward = 2 x forward (Kaplan et al. 2020 §2.1)
SRC_DELTANET = (
    "Gated DeltaNet (Yang et al. 2024, arXiv 2412.06464) §3.3 chunkwise form: per chunk of C "
    "tokens, state matmuls 3·2·C·d_k·d_v, intra-chunk 3·2·C²·d_k + 2·2·C²·d_v and the UT "
    "inverse 2·C³/3, per value head; fla chunk size C = 64; backward = 2 × forward"
)


CAUSAL_SHARE = 0.5  # a causal mask keeps half the s x s scores


def attention_score_flop(
    spec: ModelSpec, *, seq: int, micro_batch: int, mask: AttentionFlops = AttentionFlops.full
) -> float:
    """6·b·s²·n_heads·(d_qk + d_v)·L_full: QKᵀ and scores·V, forward + backward.

    Source: Narayanan et al. 2021 Eq. 3 (the s/(6h) term, 12·b·s²·h with d_qk = d_v = h/n),
    with the query width n_heads·head_dim in place of h, MLA's value head v_head_dim for the
    scores·V product (DeepSeek-V3: 128, not the 192 of q·k), only full-attention layers of a
    hybrid model, and ``mask=causal`` halving it (``SRC_CAUSAL``).
    """
    d_qk = spec.head_dim_resolved
    d_v = (spec.v_head_dim or d_qk) if spec.is_mla else d_qk
    half = ATTN_SCORE_FLOP_COEFF // 2  # 6 = 2 FLOP/MAC × 3 passes, per product
    full = half * micro_batch * seq**2 * spec.num_attention_heads * (d_qk + d_v)
    share = CAUSAL_SHARE if mask is AttentionFlops.causal else 1
    return full * spec.full_attention_layers * share


def deltanet_flop(spec: ModelSpec, *, seq: int, micro_batch: int, chunk: int) -> float:
    """Chunked delta-rule FLOPs of all Gated DeltaNet layers, forward + backward (SRC_DELTANET)."""
    heads = spec.linear_num_value_heads or 0
    dk, dv = spec.linear_key_head_dim or 0, spec.linear_value_head_dim or 0
    per_chunk = FLOP_PER_MAC * (
        DELTANET_STATE_MATMULS * chunk * dk * dv
        + DELTANET_INTRA_K_MATMULS * chunk**2 * dk
        + DELTANET_INTRA_V_MATMULS * chunk**2 * dv
        + chunk**3 / TRIANGULAR_SOLVE_DIVISOR
    )
    chunks = micro_batch * -(-seq // chunk)
    return PASSES_FWD_BWD * per_chunk * heads * chunks * spec.linear_attention_layers


def counted_params(spec: ModelSpec, params: ParamConvention, *, mtp: bool) -> int:
    """N of 6·N·tokens: the convention's count, with an MoE's active parameters (``SRC_ACTIVE``)
    and the MTP module only when ``mtp``. Dense models: ``params_for`` when ``mtp`` matches the
    convention (``all`` includes MTP, ``matmul`` leaves it out: the seeds' counts)."""
    if params is ParamConvention.all:
        if spec.is_moe:
            n = active_params(spec) + declared_params(spec)
            return n + (active_mtp_params(spec) if mtp else 0)
        return total_params(spec) - (0 if mtp else mtp_params(spec))
    if spec.is_moe:
        n = active_params(spec) - embedding_params(spec) - _head(spec) + lm_head_matmul_params(spec)
        return n + (active_mtp_params(spec) if mtp else 0)
    return matmul_params(spec) + (mtp_params(spec) if mtp else 0)


def _head(spec: ModelSpec) -> int:
    return 0 if spec.tie_word_embeddings else lm_head_matmul_params(spec)


def flops_terms(
    spec: ModelSpec,
    hw: HardwareSpec,
    *,
    t: int,
    seq: int,
    micro_batch: int,
    params: ParamConvention,
    attention: bool = False,
    mask: AttentionFlops = AttentionFlops.full,
    mtp: bool | None = None,
) -> tuple[Term, ...]:
    """Per-rank FLOPs of one micro-batch forward + backward, and its time at achieved FLOP/s.

    MoE models count active parameters (``counted_params``); ``mtp`` counts the MTP module
    (default: as the convention does, ``all`` yes, ``matmul`` no)."""
    # Here, not at the top: the activation records it pulls in cost every command start-up.
    from tpcalc.calc.activations.exact.linear_attention import FLA_CHUNK_SIZE

    mtp = (params is ParamConvention.all) if mtp is None else mtp
    n = counted_params(spec, params, mtp=mtp)
    tokens = seq * micro_batch
    achieved = hw.achieved_flop_per_s.value
    dense = (FLOP_PER_PARAM_TOKEN_FWD + FLOP_PER_PARAM_TOKEN_BWD) * n * tokens / t
    attn = (
        attention_score_flop(spec, seq=seq, micro_batch=micro_batch, mask=mask) / t
        if attention
        else 0.0
    )
    linear = (
        deltanet_flop(spec, seq=seq, micro_batch=micro_batch, chunk=FLA_CHUNK_SIZE) / t
        if attention and spec.linear_attention_layers
        else 0.0
    )
    total = dense + attn + linear
    active = " active" if spec.is_moe else ""
    fwd_share = FLOP_PER_PARAM_TOKEN_FWD / (FLOP_PER_PARAM_TOKEN_FWD + FLOP_PER_PARAM_TOKEN_BWD)
    out = [
        term(
            "n_params",
            f"N ({params.value}{active}{', + MTP' if mtp and spec.mtp_layers else ''})",
            n,
            Unit.params,
            formula=f"parameters counted as '{params.value}'"
            + (", active (k of E routed experts)" if spec.is_moe else ""),
            source=params_source(params) + (f"; {SRC_ACTIVE}" if spec.is_moe else ""),
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
                formula="6·b·s²·n_h·(d_qk + d_v)·L_full/t"
                + (" · 1/2 (causal)" if mask is AttentionFlops.causal else ""),
                source="Narayanan et al. 2021 Eq. 3 (s/6h term) without the recompute pass"
                + (f"; {SRC_CAUSAL}" if mask is AttentionFlops.causal else ""),
                part_of="flop_per_rank",
                b=micro_batch,
                s=seq,
                n_h=spec.num_attention_heads,
                d_qk=spec.head_dim_resolved,
                d_v=(spec.v_head_dim or spec.head_dim_resolved)
                if spec.is_mla
                else spec.head_dim_resolved,
                L_full=spec.full_attention_layers,
                mask=mask.value,
                t=t,
            )
        )
    if linear:
        out.append(
            term(
                "linear_attention_flop_per_rank",
                "Gated DeltaNet chunked delta rule /t",
                linear,
                Unit.flop,
                formula="3·H_v·(s/C)·b·2·(3C·d_k·d_v + 3C²·d_k + 2C²·d_v + C³/3)·L_linear/t",
                source=SRC_DELTANET,
                part_of="flop_per_rank",
                H_v=spec.linear_num_value_heads or 0,
                d_k=spec.linear_key_head_dim or 0,
                d_v=spec.linear_value_head_dim or 0,
                C=FLA_CHUNK_SIZE,
                L_linear=spec.linear_attention_layers,
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
