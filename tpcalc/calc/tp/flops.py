"""Per-rank training FLOPs and compute time under tensor parallelism.

6·N·tokens: forward 2N and backward 4N FLOP per token (Kaplan et al. 2020 §2.1; Narayanan et al.
2021 §5.1). Which N is an explicit convention: seed 003 §7.3.5 (table 7-7) uses all parameters,
seed 000 uses "matmul" parameters. The optional attention-score term is the s² part of
Narayanan et al. 2021 Eq. 3, 96·B·s·l·h²·(s/6h), which counts the recompute forward too;
without it (3 passes, not 4) 72·B·s·l·h²·(s/6h) = 12·B·s²·l·h (QKᵀ and score·V, fwd + bwd),
as Megatron-LM training.py num_floating_point_operations counts it (the s/h term).
"""

from __future__ import annotations

from msgspec import Struct

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

FLOP_PER_PARAM_TOKEN_FWD = 2  # one multiply-add per weight per token
FLOP_PER_PARAM_TOKEN_BWD = 4  # grads w.r.t. inputs and weights: twice the forward
ATTN_SCORE_FLOP_COEFF = 12  # 4·s²·h forward (QKᵀ, A·V) × 3 passes (Narayanan Eq. 3 has × 4)

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
CAUSAL_SHARE = 0.5  # a causal mask keeps half the s x s scores


def attention_score_flop(
    spec: ModelSpec, *, seq: int, micro_batch: int, mask: AttentionFlops = AttentionFlops.full
) -> float:
    """6·b·s²·n_heads·(d_qk + d_v)·L_full: QKᵀ and scores·V, forward + backward.

    Source: Narayanan et al. 2021 Eq. 3 (the s/(6h) term, 12·b·s²·h with d_qk = d_v = h/n),
    with the query width n_heads·head_dim in place of h, MLA's value head v_head_dim for the
    scores·V product (DeepSeek-V3: 128, not the 192 of q·k), only full-attention layers of a
    hybrid model, and ``mask=causal`` halving it (``flops_explain.SRC_CAUSAL``).
    """
    d_qk = spec.head_dim_resolved
    d_v = (spec.v_head_dim or d_qk) if spec.is_mla else d_qk
    half = ATTN_SCORE_FLOP_COEFF // 2  # 6 = 2 FLOP/MAC × 3 passes, per product
    full = half * micro_batch * seq**2 * spec.num_attention_heads * (d_qk + d_v)
    share = CAUSAL_SHARE if mask is AttentionFlops.causal else 1
    return full * spec.full_attention_layers * share


def deltanet_flop(spec: ModelSpec, *, seq: int, micro_batch: int, chunk: int) -> float:
    """Chunked delta-rule FLOPs of all Gated DeltaNet layers, forward + backward
    (``flops_explain.SRC_DELTANET``)."""
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


class TpFlops(Struct, frozen=True):
    """Per-rank FLOPs of one micro-batch forward + backward, and its time at achieved FLOP/s.

    The attention parts are 0 unless counted (``attention``; the linear part only for a model
    with Gated DeltaNet layers). Labels, formulas and sources: ``tpcalc.calc.tp.flops_explain``.
    """

    t: int
    seq: int
    micro_batch: int
    params: ParamConvention
    moe: bool  # N counts active parameters
    mtp: bool  # N counts the MTP module
    mtp_counted: bool  # ... and the model has one (the N label says "+ MTP")
    attention: bool  # the attention-score parts are counted
    mask: AttentionFlops
    n_params: int
    tokens: int
    dense_flop_per_rank: float
    attention_flop_per_rank: float
    linear_attention_flop_per_rank: float
    flop_per_rank: float
    forward_flop_per_rank: float
    backward_flop_per_rank: float
    achieved_flop_per_s: float
    compute_time_s: float
    backward_time_s: float

    @property
    def linear_attention_counted(self) -> bool:
        return bool(self.linear_attention_flop_per_rank)


FWD_SHARE = FLOP_PER_PARAM_TOKEN_FWD / (FLOP_PER_PARAM_TOKEN_FWD + FLOP_PER_PARAM_TOKEN_BWD)


def tp_flops(
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
) -> TpFlops:
    """6·N·s·b/t (+ the attention-score and Gated DeltaNet parts when ``attention``), split
    2/6 forward and 4/6 backward, timed at the card's achieved FLOP/s.

    MoE models count active parameters (``counted_params``); ``mtp`` counts the MTP module
    (default: as the convention does, ``all`` yes, ``matmul`` no)."""
    mtp = (params is ParamConvention.all) if mtp is None else mtp
    N = counted_params(spec, params, mtp=mtp)
    tokens = seq * micro_batch
    dense = (FLOP_PER_PARAM_TOKEN_FWD + FLOP_PER_PARAM_TOKEN_BWD) * N * tokens / t
    attn, linear = 0.0, 0.0
    if attention:
        attn = attention_score_flop(spec, seq=seq, micro_batch=micro_batch, mask=mask) / t
    if attention and spec.linear_attention_layers:
        # Here only: the activation records it pulls in cost every command start-up.
        from tpcalc.calc.activations.exact.linear_attention import FLA_CHUNK_SIZE

        linear = deltanet_flop(spec, seq=seq, micro_batch=micro_batch, chunk=FLA_CHUNK_SIZE) / t
    total = dense + attn + linear
    achieved = hw.achieved_flop_per_s.value
    return TpFlops(
        t=t,
        seq=seq,
        micro_batch=micro_batch,
        params=params,
        moe=spec.is_moe,
        mtp=mtp,
        mtp_counted=mtp and bool(spec.mtp_layers),
        attention=attention,
        mask=mask,
        n_params=N,
        tokens=tokens,
        dense_flop_per_rank=dense,
        attention_flop_per_rank=attn,
        linear_attention_flop_per_rank=linear,
        flop_per_rank=total,
        forward_flop_per_rank=total * FWD_SHARE,
        backward_flop_per_rank=total * (1 - FWD_SHARE),
        achieved_flop_per_s=achieved,
        compute_time_s=total / achieved,
        backward_time_s=total * (1 - FWD_SHARE) / achieved,
    )
