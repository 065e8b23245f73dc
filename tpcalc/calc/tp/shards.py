"""Tensor-parallel constraints and per-card shards: what a model looks like split over t cards.

- ``tp_shards``: heads, KV heads (and their replication), FFN widths, linear-attention heads and
  the padded vocabulary per rank, the memory KV replication costs, and KV warnings (the
  ``tpcalc check`` report, ``tpcalc.reports.tp.check_report``, sweeps it over t);
- ``tp.weights.model_weights``: seed 003 §7.3.4's per-card shard table, one ``ShardedWeight``
  per weight (its rows: ``tp.table_explain``, ``tpcalc.reports.tp.shard_shapes``);
- ``per_rank_params`` / ``rank_params`` (terms: ``table_explain``): parameters one rank holds
  after TP (KV replicas, vocab padding and replicated norms included; declared vision towers
  excluded);
- ``valid_tp_sizes`` / ``max_t_without_replication``: which t the model admits.

Sources: Shoeybi et al. 2019 (arXiv 1909.08053) §3; Megatron-LM ``core/utils.py::divide`` and
``core/tensor_parallel/layers.py`` (ColumnParallelLinear, RowParallelLinear,
VocabParallelEmbedding); seed 003 §7.3.4 and §7.3.7; seed 000's GQA paragraph. The rules live
in ``tp.rules``, the weight inventory in ``tp.weights``, the tables in ``tp.table``.
"""

from __future__ import annotations

from fractions import Fraction

from msgspec import Struct

from tpcalc.calc.params.counts import KV_PROJECTIONS
from tpcalc.calc.tp.rules import kv_split, kv_warning, padded_vocab, split_sizes, uses_kv_heads
from tpcalc.calc.tp.table import exact
from tpcalc.calc.tp.weights import ShardedWeight, model_weights
from tpcalc.choices import DEFAULT_VOCAB_PAD_MULTIPLE
from tpcalc.specs import ModelSpec
from tpcalc.units import Dtype


class Width(Struct, frozen=True):
    """One size t must divide (``tp.rules.split_sizes``) and its share per rank."""

    name: str  # the split_sizes name: "num_attention_heads", "intermediate_size", ...
    size: int
    per_rank: int


class KvSplit(Struct, frozen=True):
    """KV heads per rank, their replicas, and the K/V projection bytes replication adds per
    rank over all attention layers (MTP included). Source: vLLM QKVParallelLinear; seed 000."""

    t: int
    n_kv: int
    head_dim: int
    layers: int
    h_in: int  # input rows of W_K (a bias is one more)
    dtype_bytes: int
    kv_heads_per_rank: int
    kv_replicas: int
    kv_weight_bytes_per_rank: int
    kv_weight_even_bytes_per_rank: int | float
    kv_replication_extra_bytes_per_rank: int | float


class VocabPadding(Struct, frozen=True):
    """Megatron pads the vocab to a multiple of m·t (m = make_vocab_size_divisible_by)."""

    t: int
    vocab_size: int
    pad_multiple: int
    padded_vocab: int
    vocab_rows_per_rank: int
    vocab_padding_rows: int


class TpShards(Struct, frozen=True):
    """What ``spec`` looks like on one of t ranks: per-rank widths (every size t must divide),
    the KV split (models with KV heads), the padded vocabulary and parameters per rank.
    Labels, formulas and sources: ``tpcalc.calc.tp.shards_explain``."""

    t: int
    mla: bool
    widths: tuple[Width, ...]
    kv: KvSplit | None
    vocab: VocabPadding
    weights: int  # weight matrices the total sums over
    params_per_rank: int
    warnings: tuple[str, ...]


def kv_split_bytes(spec: ModelSpec, t: int, ws: tuple[ShardedWeight, ...], dtype: Dtype) -> KvSplit:
    """2 · L · h_in · d · kv_per_rank · bytes held, against 2 · L · h_in · d · n_kv / t split
    evenly; the difference is what replication costs. Source: vLLM QKVParallelLinear."""
    n_kv, d = spec.kv_heads, spec.head_dim_resolved
    per_rank, replicas = kv_split(spec, t)
    k_proj = next(w for w in ws if w.block == "attention" and w.weight == "W_K")
    layers = k_proj.instances
    h_in = k_proj.rows + any(w.weight == "b_K" for w in ws)  # a bias is one more input row
    held = KV_PROJECTIONS * layers * h_in * d * per_rank * dtype.bytes
    even = Fraction(KV_PROJECTIONS * layers * h_in * d * n_kv * dtype.bytes, t)
    return KvSplit(
        t=t, n_kv=n_kv, head_dim=d, layers=layers, h_in=h_in, dtype_bytes=dtype.bytes,
        kv_heads_per_rank=per_rank, kv_replicas=replicas, kv_weight_bytes_per_rank=held,
        kv_weight_even_bytes_per_rank=exact(even),
        kv_replication_extra_bytes_per_rank=exact(held - even),
    )  # fmt: skip


def vocab_padding(spec: ModelSpec, t: int, pad: int) -> VocabPadding:
    """V_pad = ceil(V / (m·t))·m·t, V_pad / t rows per rank, V_pad − V padding rows."""
    v, v_pad = spec.vocab_size, padded_vocab(spec.vocab_size, t, pad)
    return VocabPadding(
        t=t, vocab_size=v, pad_multiple=pad, padded_vocab=v_pad, vocab_rows_per_rank=v_pad // t,
        vocab_padding_rows=v_pad - v,
    )  # fmt: skip


def tp_shards(
    spec: ModelSpec,
    t: int,
    *,
    vocab_pad_multiple: int = DEFAULT_VOCAB_PAD_MULTIPLE,
    dtype: Dtype = Dtype.bf16,
) -> TpShards:
    """Divisibility, KV replication and vocab padding of ``spec`` at tensor-parallel size t.

    Raises InputError for t < 1 and DivisibilityError (listing the valid t) when t does not
    divide the query heads, an FFN width or the linear-attention heads, or when KV heads can be
    neither split nor replicated evenly. KV replication itself is a warning (seed 000: 4 KV heads
    at t=8 sit on 2 cards each). K/V bytes are weights in ``dtype``.
    Sources: Shoeybi et al. 2019 §3; seed 003 §7.3.4, §7.3.7; vLLM QKVParallelLinear.
    """
    ws = model_weights(spec, t, vocab_pad_multiple)  # validates t first
    widths = tuple(Width(name, n, n // t) for name, n in split_sizes(spec))
    kv = kv_split_bytes(spec, t, ws, dtype) if uses_kv_heads(spec) else None
    warning = kv_warning(spec, t)
    return TpShards(
        t=t, mla=spec.is_mla, widths=widths, kv=kv,
        vocab=vocab_padding(spec, t, vocab_pad_multiple), weights=len(ws),
        params_per_rank=sum(w.params_per_rank for w in ws),
        warnings=(warning,) if warning else (),
    )  # fmt: skip


__all__ = ["KvSplit", "TpShards", "VocabPadding", "Width", "tp_shards"]
