"""Context parallelism, the shapes: what one ring step moves and computes, Ulysses' head limit.

A rank holds s/cp tokens; per ring step it passes one K,V block of its tokens (Liu et al. 2023,
Ring Attention, arXiv 2310.01889, §3) and computes its queries against the block it received
(FlashAttention FLOP count). Ulysses (DeepSpeed-Ulysses, arXiv 2309.14509) splits heads
instead, so its degree is bounded by the KV heads. ``tpcalc.calc.cp.ring.cp_row`` assembles the row.
"""

from __future__ import annotations

from tpcalc.calc.tp.rules import kv_split
from tpcalc.errors import divide
from tpcalc.specs import ModelSpec
from tpcalc.terms import Term, Unit, term
from tpcalc.units import Dtype

RING = "Liu et al. 2023 Ring Attention (arXiv 2310.01889) §3; seed 000 summary (CP)"
FLASH = "Dao et al. 2022 FlashAttention §3: forward 4·Nq·Nk·d FLOP per head (QK^T and PV)"
ULYSSES = "Jacobs et al. 2023 DeepSpeed-Ulysses (arXiv 2309.14509) §3: all-to-all over heads"

FLOP_PER_MAC = 2


# ---------------------------------------------------------------- shapes
def kv_dims(spec: ModelSpec, tp: int = 1) -> tuple[int, int, int]:
    """(KV heads per TP rank, K head dim, V head dim) of a full-attention layer.

    Under TP each rank holds n_kv/t KV heads, or one replicated head when t > n_kv
    (``tp.rules.kv_split``). MLA models (DeepSeek-V3) are ring-passed with K and V
    materialised per head: K of qk_nope + qk_rope, V of v_head_dim, one per query head.
    """
    if spec.is_mla:
        k_dim = (spec.qk_nope_head_dim or 0) + (spec.qk_rope_head_dim or 0)
        v_dim = spec.v_head_dim or spec.head_dim_resolved
        return q_heads_per_rank(spec, tp), k_dim, v_dim
    d = spec.head_dim_resolved
    return kv_split(spec, tp)[0], d, d


def q_heads_per_rank(spec: ModelSpec, tp: int = 1) -> int:
    """Query heads per TP rank: num_attention_heads / tp, exact (Megatron TP splits heads)."""
    return divide(spec.num_attention_heads, tp, what="num_attention_heads", by="tp")


def kv_block_bytes(
    spec: ModelSpec, *, seq: int, cp: int, micro_batch: int, dtype: Dtype, tp: int = 1
) -> int:
    """Bytes of the K,V block one rank passes per ring step: (s/cp)·b·n_kv·(d_k+d_v)·dtype.

    With d_k = d_v = head_dim this is (s/cp)·n_kv·head_dim·2·dtype (seed 000: s = 131,072,
    8 cards, 4 KV heads × 256 × (K,V) × 2 B = 67.1 MB); n_kv is per TP rank. Source: ``RING``.
    """
    local = divide(seq, cp, what="seq", by="cp")
    n_kv, d_k, d_v = kv_dims(spec, tp)
    return local * micro_batch * n_kv * (d_k + d_v) * dtype.bytes


def block_pair_flop(spec: ModelSpec, *, seq: int, cp: int, micro_batch: int, tp: int = 1) -> int:
    """Forward FLOP of one query block against one K/V block (unmasked): 4·c²·b·heads·d.

    c = s/cp tokens per block, heads = query heads per TP rank; QK^T costs 2·c²·d_k and PV
    2·c²·d_v per query head. Source: ``FLASH``.
    """
    c = divide(seq, cp, what="seq", by="cp")
    _, d_k, d_v = kv_dims(spec, tp)
    return FLOP_PER_MAC * c * c * micro_batch * q_heads_per_rank(spec, tp) * (d_k + d_v)


# ---------------------------------------------------------------- Ulysses
def ulysses_max_cp(spec: ModelSpec) -> int:
    """Largest Ulysses degree without replicating K/V heads: the number of KV heads.

    Ulysses swaps the sequence split for a head split with an all-to-all, so each rank must get
    whole KV heads. Source: ``ULYSSES``; seed 000 summary: "Ulysses 按头切,KV 只有 4 个头".
    """
    return kv_dims(spec)[0]


def ulysses_fits(spec: ModelSpec, cp: int) -> bool:
    """True when cp divides both the query heads and the KV heads (Ulysses' head split)."""
    n_kv = ulysses_max_cp(spec)
    return n_kv % cp == 0 and spec.num_attention_heads % cp == 0


def ulysses_terms(spec: ModelSpec, cp: int, n_kv: int) -> list[Term]:
    """The Ulysses limit as terms: ``n_kv`` KV heads (per TP rank) and whether cp fits them."""
    return [
        term(
            "ulysses_max_cp",
            "largest Ulysses degree (KV heads)",
            n_kv,
            Unit.count,
            formula="n_kv",
            source=ULYSSES,
        ),
        term(
            "ulysses_fits",
            "cp divides q and KV heads (Ulysses possible)",
            ulysses_fits(spec, cp),
            Unit.text,
            formula="n_kv % cp == 0 and n_q % cp == 0",
            source=ULYSSES,
            n_kv=n_kv,
            n_q=spec.num_attention_heads,
            cp=cp,
        ),
    ]
