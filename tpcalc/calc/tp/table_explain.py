"""Label, formula and source of every ``ShardedWeight`` field (the explain layer beside
``weights.py`` and ``table.py``): the per-card shard table of ``tpcalc check --shards``
(seed 003 §7.3.4), one row per weight."""

from __future__ import annotations

from typing import Any

from tpcalc.calc.tp.rules import Split
from tpcalc.calc.tp.table import SRC_KV, SRC_PARAMS, SRC_SPLIT
from tpcalc.calc.tp.weights import ShardedWeight
from tpcalc.explain import Explanation, terms
from tpcalc.terms import Scalar, Term, Unit

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
    return tuple(
        x.model_copy(update={"key": ROW_KEYS[x.key]}) if x.key in ROW_KEYS else x for x in rows
    )
