"""Label, formula and source of every ``TpShards`` field (the explain layer beside
``shards.py``), and the conversion to the ``Term`` rows of ``tpcalc check``."""

from __future__ import annotations

from msgspec.structs import replace

from tpcalc.calc.tp.shards import KvSplit, TpShards, VocabPadding, Width
from tpcalc.calc.tp.table_explain import SRC_KV, SRC_PARAMS, SRC_VOCAB
from tpcalc.explain import Explanation, terms
from tpcalc.terms import Scalar, Term, Unit

SRC_HEADS = "Shoeybi et al. 2019 §3 (attention split by head); seed 003 §7.3.4"
SRC_FFN = "Shoeybi et al. 2019 §3 (MLP column then row split); seed 003 §7.3.4; seed 000 (17408/8)"
SRC_EXPERT = f"{SRC_FFN}; Megatron-LM expert TP = TP"
SRC_LINEAR = "vLLM models/qwen3_next.py (Gated DeltaNet split by key/value head)"
SRC_MTP = "Megatron-LM MultiTokenPredictionLayer.eh_proj (ColumnParallelLinear)"
KV_TOTAL = "kv_weight_bytes_per_rank"

# split_sizes name -> (row key, label, symbol, source): one per-rank width row each.
WIDTH_ROWS = {
    "num_attention_heads": ("query_heads_per_rank", "query heads per rank", "n_h", SRC_HEADS),
    "intermediate_size": ("ffn_intermediate_per_rank", "FFN intermediate per rank", "I", SRC_FFN),
    "moe_intermediate_size": ("expert_ffn_per_rank", "expert FFN per rank", "I_moe", SRC_EXPERT),
    "shared expert intermediate": (
        "shared_expert_ffn_per_rank", "shared-expert FFN per rank", "I_shared", SRC_EXPERT,
    ),
    "linear_num_key_heads": (
        "linear_key_heads_per_rank", "linear-attn key heads per rank", "n_k", SRC_LINEAR,
    ),
    "linear_num_value_heads": (
        "linear_value_heads_per_rank", "linear-attn value heads per rank", "n_v", SRC_LINEAR,
    ),
    "hidden_size (MTP eh_proj)": ("mtp_eh_proj_cols_per_rank", "MTP eh_proj cols per rank", "h",
                                  SRC_MTP),
}  # fmt: skip

WIDTH_EXPLANATIONS: dict[str, Explanation] = {
    "name": Explanation("size", Unit.text, "tp.rules.split_sizes", SRC_HEADS),
    "size": Explanation("size", Unit.count, "model config", SRC_HEADS),
    "per_rank": Explanation("per rank", Unit.count, "size / t", SRC_HEADS),
}

KV_EXPLANATIONS: dict[str, Explanation] = {
    "kv_heads_per_rank": Explanation(
        "KV heads per rank", Unit.count, "n_kv / t if t < n_kv else 1", SRC_KV
    ),
    "kv_replicas": Explanation(
        "ranks per KV head", Unit.count, "t / n_kv if t > n_kv else 1", SRC_KV
    ),
    KV_TOTAL: Explanation(
        "K/V weights per rank", Unit.bytes, "2 · L · h_in · d · kv_per_rank · bytes", SRC_KV
    ),
    "kv_weight_even_bytes_per_rank": Explanation(
        "K/V weights if split evenly", Unit.bytes, "2 · L · h_in · d · n_kv / t · bytes",
        SRC_KV, KV_TOTAL,
    ),
    "kv_replication_extra_bytes_per_rank": Explanation(
        "extra K/V bytes from replication", Unit.bytes,
        "2 · L · h_in · d · (kv_per_rank − n_kv / t) · bytes", SRC_KV, KV_TOTAL,
    ),
    "t": Explanation("t", Unit.count, "tensor-parallel size", SRC_KV),
    "n_kv": Explanation("n_kv", Unit.count, "num_key_value_heads (model config)", SRC_KV),
    "head_dim": Explanation("d", Unit.count, "head_dim (model config)", SRC_KV),
    "layers": Explanation("L", Unit.count, "attention layers (MTP included)", SRC_KV),
    "h_in": Explanation("h_in", Unit.count, "W_K input rows (+1 with a bias)", SRC_KV),
    "dtype_bytes": Explanation("bytes", Unit.bytes, "weight dtype", SRC_KV),
}  # fmt: skip
KV_ROWS = (
    "kv_heads_per_rank", "kv_replicas", KV_TOTAL, "kv_weight_even_bytes_per_rank",
    "kv_replication_extra_bytes_per_rank",
)  # fmt: skip

VOCAB_EXPLANATIONS: dict[str, Explanation] = {
    "padded_vocab": Explanation(
        "padded vocab", Unit.count, "ceil(V / (m · t)) · m · t", SRC_VOCAB
    ),
    "vocab_rows_per_rank": Explanation("vocab rows per rank", Unit.count, "V_pad / t", SRC_VOCAB),
    "vocab_padding_rows": Explanation("vocab padding rows", Unit.count, "V_pad − V", SRC_VOCAB),
    "t": Explanation("t", Unit.count, "tensor-parallel size", SRC_VOCAB),
    "vocab_size": Explanation("V", Unit.count, "vocab_size (model config)", SRC_VOCAB),
    "pad_multiple": Explanation("m", Unit.count, "--vocab-pad-multiple", SRC_VOCAB),
}  # fmt: skip
VOCAB_ROWS = ("padded_vocab", "vocab_rows_per_rank", "vocab_padding_rows")

EXPLANATIONS: dict[str, Explanation] = {
    "params_per_rank": Explanation(
        "params per rank", Unit.params, "Σ instances · shard_rows · shard_cols", SRC_PARAMS
    ),
    "t": Explanation("t", Unit.count, "tensor-parallel size", SRC_PARAMS),
    "mla": Explanation("MLA", Unit.text, "the model uses MLA", SRC_HEADS),
    "weights": Explanation("weights", Unit.count, "weight matrices summed", SRC_PARAMS),
}  # fmt: skip


def width_term(w: Width, t: int, mla: bool) -> Term:
    """One per-rank width row: size / t (seed 003 §7.3.7: every size t must divide)."""
    key, label, sym, src = WIDTH_ROWS[w.name]
    if mla and w.name == "num_attention_heads":
        label = "attention heads per rank (MLA)"
    ex = {"per_rank": Explanation(label, Unit.count, f"{sym} / t", src)}
    (row,) = terms(w, ex, symbols={"per_rank": {sym: w.size, "t": t}})
    return replace(row, key=key)


def kv_terms(kv: KvSplit) -> tuple[Term, ...]:
    """KV heads per rank, replicas, and the K/V bytes replication adds."""
    common: dict[str, Scalar] = {"L": kv.layers, "h_in": kv.h_in, "d": kv.head_dim,
                                 "bytes": kv.dtype_bytes}  # fmt: skip
    nt: dict[str, Scalar] = {"n_kv": kv.n_kv, "t": kv.t}
    per: dict[str, Scalar] = {"kv_per_rank": kv.kv_heads_per_rank}
    symbols: dict[str, dict[str, Scalar]] = {
        "kv_heads_per_rank": nt,
        "kv_replicas": nt,
        KV_TOTAL: {**common, **per},
        "kv_weight_even_bytes_per_rank": {**common, **nt},
        "kv_replication_extra_bytes_per_rank": {**common, **per, **nt},
    }
    return terms(kv, {k: KV_EXPLANATIONS[k] for k in KV_ROWS}, symbols=symbols)


def vocab_terms(v: VocabPadding) -> tuple[Term, ...]:
    """The padded vocabulary, its rows per rank and the padding rows."""
    symbols: dict[str, dict[str, Scalar]] = {
        "padded_vocab": {"V": v.vocab_size, "m": v.pad_multiple, "t": v.t},
        "vocab_rows_per_rank": {"V_pad": v.padded_vocab, "t": v.t},
        "vocab_padding_rows": {"V_pad": v.padded_vocab, "V": v.vocab_size},
    }
    return terms(v, {k: VOCAB_EXPLANATIONS[k] for k in VOCAB_ROWS}, symbols=symbols)


def shards_terms(s: TpShards) -> tuple[Term, ...]:
    """The row of ``tpcalc check`` for one t: the query heads, the KV split right after them,
    the other widths, the padded vocabulary and parameters per rank."""
    widths = [width_term(w, s.t, s.mla) for w in s.widths]
    kv = kv_terms(s.kv) if s.kv is not None else ()
    total = terms(
        s, {"params_per_rank": EXPLANATIONS["params_per_rank"]},
        symbols={"params_per_rank": {"t": s.t, "weights": s.weights}},
    )  # fmt: skip
    return (*widths[:1], *kv, *widths[1:], *vocab_terms(s.vocab), *total)
