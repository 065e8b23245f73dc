"""Label, formula and source of every ``ShardedWeight`` field (the explain layer beside
``weights.py`` and ``table.py``): the per-card shard table of ``tpcalc check --shards``
(seed 003 §7.3.4), one row per weight; and of ``RankParams``, the parameters one rank holds."""

from __future__ import annotations

from typing import Any

from msgspec.structs import replace

from tpcalc.calc.tp.rules import Split
from tpcalc.calc.tp.table import RankParams, rank_params
from tpcalc.calc.tp.weights import ShardedWeight
from tpcalc.choices import DEFAULT_VOCAB_PAD_MULTIPLE
from tpcalc.explain import Explanation, terms
from tpcalc.specs import ModelSpec
from tpcalc.terms import Scalar, Term, Unit, term

LAYERS_PY = "Megatron-LM core/tensor_parallel/layers.py"
SRC_KV = "vLLM QKVParallelLinear (KV heads replicated when t > n_kv); seed 000 GQA paragraph"
SRC_VOCAB = (
    "Megatron-LM tokenizer.py::_vocab_size_with_padding and VocabParallelEmbedding; seed 003 §7.3.4"
)
SRC_PARAMS = f"{LAYERS_PY}; seed 003 table 7-8"
SRC_SPLIT = {
    Split.column: f"{LAYERS_PY}::ColumnParallelLinear; seed 003 §7.3.4",
    Split.row: f"{LAYERS_PY}::RowParallelLinear; seed 003 §7.3.4",
    Split.vocab: SRC_VOCAB,
    Split.replicated: "not split by TP (seed 003 table 7-8: norm parameters on every card)",
}
BLOCK_LABELS = {
    "embedding": "embedding",
    "attention": "attention (GQA)",
    "mla": "attention (MLA)",
    "linear_attention": "linear attention",
    "mlp": "dense MLP",
    "moe": "MoE (router + experts)",
    "mtp": "MTP extras",
    "norm": "norms",
    "lm_head": "LM head",
}

# Field -> row key, where the row's key is not the field's name.
ROW_KEYS = {"rows": "full_rows", "cols": "full_cols", "replicas": "kv_replicas"}
ROWS = (
    "rows", "cols", "shard_rows", "shard_cols", "replicas", "instances", "shard_params",
    "params_per_rank",
)  # fmt: skip
# The rows printed without a formula or source (the weight's own shape and counts).
PLAIN = ("rows", "cols", "replicas", "instances")

Dim = tuple[str, dict[str, Any]]


def shard_dims(w: ShardedWeight, t: int, n_kv: int) -> tuple[Dim, Dim]:
    """(formula, inputs) of the shard's rows and of its columns."""
    keep_rows: Dim = ("rows", {"rows": w.rows})
    keep_cols: Dim = ("cols", {"cols": w.cols})
    if w.replicas > 1:
        return keep_rows, ("cols / n_kv (one KV head per rank)", {"cols": w.cols, "n_kv": n_kv})
    if w.split is Split.column:
        return keep_rows, ("cols / t", {"cols": w.cols, "t": t})
    if w.split is Split.row:
        return ("rows / t", {"rows": w.rows, "t": t}), keep_cols
    if w.split is Split.vocab and w.block == "embedding":
        return ("V_pad / t", {"V_pad": w.shard_rows * t, "t": t}), keep_cols
    if w.split is Split.vocab:
        return keep_rows, ("V_pad / t", {"V_pad": w.shard_cols * t, "t": t})
    return keep_rows, keep_cols


def explanations(w: ShardedWeight, t: int, n_kv: int) -> dict[str, Explanation]:
    """The explain table of one ``ShardedWeight``: its split names the shard formulas and
    their source (the K/V replication rule when the shard is replicated)."""
    src = SRC_KV if w.replicas > 1 else SRC_SPLIT[w.split]
    (f_rows, _), (f_cols, _) = shard_dims(w, t, n_kv)
    return {
        "rows": Explanation("rows", Unit.count, "", ""),
        "cols": Explanation("cols", Unit.count, "", ""),
        "shard_rows": Explanation("shard rows", Unit.count, f_rows, src),
        "shard_cols": Explanation("shard cols", Unit.count, f_cols, src),
        "replicas": Explanation("ranks per shard", Unit.count, "", ""),
        "instances": Explanation("instances", Unit.count, "", ""),
        "shard_params": Explanation(
            "params per shard", Unit.params, "shard_rows · shard_cols", src
        ),
        "params_per_rank": Explanation(
            "params per rank", Unit.params, "instances · shard_params", SRC_PARAMS
        ),
        # echoed as the row's inputs, not as rows
        "block": Explanation("block", Unit.text, "the weight's block", SRC_PARAMS),
        "weight": Explanation("weight", Unit.text, "seed 003's name or the HF module", SRC_PARAMS),
        "module": Explanation("module", Unit.text, "Hugging Face module path", SRC_PARAMS),
    }  # fmt: skip


def weight_terms(w: ShardedWeight, t: int, n_kv: int) -> tuple[Term, ...]:
    """The shard-table row of one weight: full and shard shape, replicas, instances, params."""
    (_, in_rows), (_, in_cols) = shard_dims(w, t, n_kv)
    symbols: dict[str, dict[str, Scalar]] = {
        "shard_rows": in_rows,
        "shard_cols": in_cols,
        "shard_params": {"shard_rows": w.shard_rows, "shard_cols": w.shard_cols},
        "params_per_rank": {"instances": w.instances, "shard_params": w.shard_params},
    }
    table = explanations(w, t, n_kv)
    rows = terms(w, {k: table[k] for k in ROWS}, symbols=symbols)
    return tuple(replace(x, key=ROW_KEYS[x.key]) if x.key in ROW_KEYS else x for x in rows)


TOTAL = "params_per_rank"
SUM_FORMULA = "Σ instances · shard_rows · shard_cols"
RANK_EXPLANATIONS = {
    TOTAL: Explanation("params per rank", Unit.params, SUM_FORMULA, SRC_PARAMS),
    "replicated_params_per_rank": Explanation(
        "of which replicated (norms, routers)", Unit.params,
        "Σ params of the weights TP does not split", SRC_PARAMS,
    ),
    "kv_replica_params_per_rank": Explanation(
        "of which KV replicas", Unit.params,
        "Σ (instances · shard params − instances · params / t) over replicated K/V", SRC_KV,
    ),
    "vocab_padding_params": Explanation(
        "vocab padding params (all ranks)", Unit.params, "(V_pad − V) · h per vocab matrix",
        SRC_VOCAB,
    ),
    "excluded_declared_params": Explanation(
        "declared parts not counted (vision tower)", Unit.params,
        "Σ tpcalc.declared_parts.params",
        "model config tpcalc.declared_parts (shapes unknown, so not sharded)",
    ),
}  # fmt: skip
RANK_INPUTS = {
    "t": Explanation("t", Unit.count, "tensor-parallel size", SRC_PARAMS),
    "weights": Explanation("weights", Unit.count, "weight tensors counted", SRC_PARAMS),
}
DETAILS = (
    "replicated_params_per_rank", "kv_replica_params_per_rank", "vocab_padding_params",
    "excluded_declared_params",
)  # fmt: skip


def rank_param_terms(r: RankParams) -> tuple[Term, ...]:
    """The total, its parts by block (flattened here to ``{block}_params_per_rank``), then what
    sits inside it (replicated, KV replicas, vocab padding) and outside it (declared parts)."""
    symbols: dict[str, dict[str, Scalar]] = {
        TOTAL: {"t": r.t, "weights": r.weights}, "kv_replica_params_per_rank": {"t": r.t}
    }  # fmt: skip
    blocks = [
        term(f"{b.block}_params_per_rank", BLOCK_LABELS.get(b.block, b.block), b.params_per_rank,
             Unit.params, formula=SUM_FORMULA, source=SRC_PARAMS, part_of=TOTAL, t=r.t)
        for b in r.blocks
    ]  # fmt: skip
    details = {k: RANK_EXPLANATIONS[k] for k in DETAILS}
    return (
        *terms(r, {TOTAL: RANK_EXPLANATIONS[TOTAL]}, symbols=symbols),
        *blocks,
        *terms(r, details, symbols=symbols),
    )


def per_rank_param_terms(
    spec: ModelSpec, t: int, *, vocab_pad_multiple: int = DEFAULT_VOCAB_PAD_MULTIPLE
) -> tuple[Term, ...]:
    """``rank_params`` as terms (``rank_param_terms``). Source: seed 003 table 7-8."""
    return rank_param_terms(rank_params(spec, t, vocab_pad_multiple=vocab_pad_multiple))
