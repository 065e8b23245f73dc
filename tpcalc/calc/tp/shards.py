"""Tensor-parallel constraints and per-card shards: what a model looks like split over t cards.

- ``check_tp``: heads, KV heads (and their replication), FFN widths, linear-attention heads and
  the padded vocabulary per rank, the memory KV replication costs, and KV warnings (the
  ``tpcalc check`` report, ``tpcalc.reports.tp.check_report``, sweeps it over t);
- ``shard_shapes`` (``tp.table``): seed 003 §7.3.4's per-card shard table, one row per weight;
- ``per_rank_params`` / ``per_rank_param_terms``: parameters one rank holds after TP
  (KV replicas, vocab padding and replicated norms included; declared vision towers excluded);
- ``valid_tp_sizes`` / ``max_t_without_replication``: which t the model admits.

Sources: Shoeybi et al. 2019 (arXiv 1909.08053) §3; Megatron-LM ``core/utils.py::divide`` and
``core/tensor_parallel/layers.py`` (ColumnParallelLinear, RowParallelLinear,
VocabParallelEmbedding); seed 003 §7.3.4 and §7.3.7; seed 000's GQA paragraph. The rules live
in ``tp.rules``, the weight inventory in ``tp.weights``, the tables in ``tp.table``.
"""

from __future__ import annotations

from fractions import Fraction

from pydantic import BaseModel, ConfigDict

from tpcalc.calc.params.counts import KV_PROJECTIONS
from tpcalc.calc.tp.rules import kv_split, kv_warning, padded_vocab, split_sizes, uses_kv_heads
from tpcalc.calc.tp.table import SRC_KV, SRC_VOCAB, exact, row_inputs, total_term
from tpcalc.calc.tp.weights import ShardedWeight, model_weights
from tpcalc.choices import DEFAULT_VOCAB_PAD_MULTIPLE
from tpcalc.specs import ModelSpec
from tpcalc.terms import Row, Term, Unit, term
from tpcalc.units import Dtype

SRC_HEADS = "Shoeybi et al. 2019 §3 (attention split by head); seed 003 §7.3.4"
SRC_FFN = "Shoeybi et al. 2019 §3 (MLP column then row split); seed 003 §7.3.4; seed 000 (17408/8)"
SRC_EXPERT = f"{SRC_FFN}; Megatron-LM expert TP = TP"
SRC_LINEAR = "vLLM models/qwen3_next.py (Gated DeltaNet split by key/value head)"
SRC_MTP = "Megatron-LM MultiTokenPredictionLayer.eh_proj (ColumnParallelLinear)"

# split_sizes name -> (term key, label, symbol, source): one per-rank width term each.
WIDTH_TERMS = {
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


class TpCheck(BaseModel):
    """``check_tp``'s answer for one t: the summary row and warnings (KV replication)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    row: Row
    warnings: tuple[str, ...] = ()


def _width_terms(spec: ModelSpec, t: int) -> list[Term]:
    """Per-rank heads and FFN widths: every size t must divide (seed 003 §7.3.7)."""
    out = []
    for what, n in split_sizes(spec):
        key, label, sym, src = WIDTH_TERMS[what]
        if spec.is_mla and what == "num_attention_heads":
            label = "attention heads per rank (MLA)"
        out.append(term(key, label, n // t, Unit.count, formula=f"{sym} / t", source=src,
                        symbols={sym: n, "t": t}))  # fmt: skip
    return out


def _kv_terms(spec: ModelSpec, t: int, ws: tuple[ShardedWeight, ...], dtype: Dtype) -> list[Term]:
    """KV heads per rank, replicas, and the K/V projection bytes replication adds per rank,
    over all attention layers (MTP included). Source: vLLM QKVParallelLinear; seed 000."""
    n_kv, d = spec.kv_heads, spec.head_dim_resolved
    per_rank, replicas = kv_split(spec, t)
    k_proj = next(w for w in ws if w.block == "attention" and w.weight == "W_K")
    layers = k_proj.instances
    h_in = k_proj.rows + any(w.weight == "b_K" for w in ws)  # a bias is one more input row
    common = {"L": layers, "h_in": h_in, "d": d, "bytes": dtype.bytes}
    held = KV_PROJECTIONS * layers * h_in * d * per_rank * dtype.bytes
    even = Fraction(KV_PROJECTIONS * layers * h_in * d * n_kv * dtype.bytes, t)
    return [
        term("kv_heads_per_rank", "KV heads per rank", per_rank, Unit.count,
             formula="n_kv / t if t < n_kv else 1", source=SRC_KV, n_kv=n_kv, t=t),
        term("kv_replicas", "ranks per KV head", replicas, Unit.count,
             formula="t / n_kv if t > n_kv else 1", source=SRC_KV, n_kv=n_kv, t=t),
        term("kv_weight_bytes_per_rank", "K/V weights per rank", held, Unit.bytes,
             formula="2 · L · h_in · d · kv_per_rank · bytes", source=SRC_KV,
             kv_per_rank=per_rank, symbols=common),
        term("kv_weight_even_bytes_per_rank", "K/V weights if split evenly", exact(even),
             Unit.bytes, formula="2 · L · h_in · d · n_kv / t · bytes", source=SRC_KV,
             part_of="kv_weight_bytes_per_rank", n_kv=n_kv, t=t, symbols=common),
        term("kv_replication_extra_bytes_per_rank", "extra K/V bytes from replication",
             exact(held - even), Unit.bytes,
             formula="2 · L · h_in · d · (kv_per_rank − n_kv / t) · bytes", source=SRC_KV,
             part_of="kv_weight_bytes_per_rank", kv_per_rank=per_rank, n_kv=n_kv, t=t,
             symbols=common),
    ]  # fmt: skip


def _vocab_terms(spec: ModelSpec, t: int, pad: int) -> list[Term]:
    """Megatron pads the vocab to a multiple of m·t (m = make_vocab_size_divisible_by)."""
    v, v_pad = spec.vocab_size, padded_vocab(spec.vocab_size, t, pad)
    return [
        term("padded_vocab", "padded vocab", v_pad, Unit.count, source=SRC_VOCAB,
             formula="ceil(V / (m · t)) · m · t", V=v, m=pad, t=t),
        term("vocab_rows_per_rank", "vocab rows per rank", v_pad // t, Unit.count,
             formula="V_pad / t", source=SRC_VOCAB, V_pad=v_pad, t=t),
        term("vocab_padding_rows", "vocab padding rows", v_pad - v, Unit.count,
             formula="V_pad − V", source=SRC_VOCAB, V_pad=v_pad, V=v),
    ]  # fmt: skip


def check_tp(
    spec: ModelSpec,
    t: int,
    *,
    vocab_pad_multiple: int = DEFAULT_VOCAB_PAD_MULTIPLE,
    dtype: Dtype = Dtype.bf16,
) -> TpCheck:
    """Divisibility, KV replication and vocab padding of ``spec`` at tensor-parallel size t.

    Raises InputError for t < 1 and DivisibilityError (listing the valid t) when t does not
    divide the query heads, an FFN width or the linear-attention heads, or when KV heads can be
    neither split nor replicated evenly. KV replication itself is a warning (seed 000: 4 KV heads
    at t=8 sit on 2 cards each). K/V bytes are weights in ``dtype``.
    Sources: Shoeybi et al. 2019 §3; seed 003 §7.3.4, §7.3.7; vLLM QKVParallelLinear.
    """
    ws = model_weights(spec, t, vocab_pad_multiple)  # validates t first
    terms = _width_terms(spec, t)
    if uses_kv_heads(spec):
        terms[1:1] = _kv_terms(spec, t, ws, dtype)  # right after the query heads
    terms += [*_vocab_terms(spec, t, vocab_pad_multiple), total_term(ws, t)]
    inputs = row_inputs(spec, t, vocab_pad_multiple, dtype=dtype.value)
    warning = kv_warning(spec, t)
    return TpCheck(
        row=Row(inputs=inputs, terms=tuple(terms)), warnings=(warning,) if warning else ()
    )


__all__ = ["TpCheck", "check_tp"]
