"""Per-card shard table and per-rank parameter counts (seed 003 §7.3.4 and table 7-8).

Declared parts (a vision tower) are EXCLUDED from every per-rank count: tpcalc knows only their
total, not their shapes, so it cannot shard them; ``excluded_declared_params`` reports them.
At t=1 with vocab pad multiple 1, ``per_rank_params`` is therefore the model total minus the
declared parts.
"""

from __future__ import annotations

from fractions import Fraction

from tpcalc.calc.tp.rules import Split
from tpcalc.calc.tp.weights import ShardedWeight, layer_weights, model_weights
from tpcalc.choices import DEFAULT_VOCAB_PAD_MULTIPLE
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


def exact(x: Fraction) -> int | float:
    """An int when the fraction is whole, else a float."""
    return int(x) if x.denominator == 1 else float(x)


def row_inputs(spec: ModelSpec, t: int, pad: int, **more: Scalar) -> dict[str, Scalar]:
    """The inputs every shard-table row echoes: model, t, vocab pad multiple, and more."""
    return {"model": spec.name, "t": t, "vocab_pad_multiple": pad, **more}


def total_term(ws: tuple[ShardedWeight, ...], t: int) -> Term:
    """Parameters per rank: the sum over every weight of instances × shard size."""
    return term(
        "params_per_rank",
        "params per rank",
        sum(w.params_per_rank for w in ws),
        Unit.params,
        formula="Σ instances · shard_rows · shard_cols",
        source=SRC_PARAMS,
        t=t,
        weights=len(ws),
    )


def _detail_terms(spec: ModelSpec, t: int, ws: tuple[ShardedWeight, ...]) -> list[Term]:
    """What sits inside the total: replicated weights, KV replicas, vocab padding; and what is
    outside it: declared parts."""
    replicated = sum(w.params_per_rank for w in ws if w.split is Split.replicated)
    kv_extra = sum(
        w.params_per_rank - exact(Fraction(w.params * w.instances, t)) for w in ws if w.replicas > 1
    )
    padding = sum(
        (w.shard_params * t - w.params) * w.instances for w in ws if w.split is Split.vocab
    )
    declared = sum(p.params for p in spec.tpcalc.declared_parts)
    return [
        term("replicated_params_per_rank", "of which replicated (norms, routers)", replicated,
             Unit.params, formula="Σ params of the weights TP does not split", source=SRC_PARAMS),
        term("kv_replica_params_per_rank", "of which KV replicas", kv_extra, Unit.params,
             formula="Σ (instances · shard params − instances · params / t) over replicated K/V",
             source=SRC_KV, t=t),
        term("vocab_padding_params", "vocab padding params (all ranks)", padding, Unit.params,
             formula="(V_pad − V) · h per vocab matrix", source=SRC_VOCAB),
        term("excluded_declared_params", "declared parts not counted (vision tower)", declared,
             Unit.params, formula="Σ tpcalc.declared_parts.params",
             source="model config tpcalc.declared_parts (shapes unknown, so not sharded)"),
    ]  # fmt: skip


def per_rank_param_terms(
    spec: ModelSpec, t: int, *, vocab_pad_multiple: int = DEFAULT_VOCAB_PAD_MULTIPLE
) -> tuple[Term, ...]:
    """Parameters one rank holds after TP: the total, its parts by block, then details
    (replicated, KV replicas, vocab padding, excluded declared parts).
    Source: seed 003 table 7-8; Megatron-LM layers.py."""
    ws = model_weights(spec, t, vocab_pad_multiple)
    parts: dict[str, int] = {}
    for w in ws:
        parts[w.block] = parts.get(w.block, 0) + w.params_per_rank
    block_terms = [
        term(f"{block}_params_per_rank", BLOCK_LABELS.get(block, block), n, Unit.params,
             formula="Σ instances · shard_rows · shard_cols", source=SRC_PARAMS,
             part_of="params_per_rank", t=t)
        for block, n in parts.items()
    ]  # fmt: skip
    return (total_term(ws, t), *block_terms, *_detail_terms(spec, t, ws))


def per_rank_params(
    spec: ModelSpec, t: int, *, vocab_pad_multiple: int = DEFAULT_VOCAB_PAD_MULTIPLE
) -> int:
    """Parameters each rank holds after TP sharding: KV replicas, vocab padding and replicated
    norms counted; declared parts (vision tower) excluded. Llama 3 70B at t=1, pad 1:
    70,553,706,496, all of it. Source: seed 003 table 7-8; Megatron-LM layers.py."""
    return sum(w.params_per_rank for w in model_weights(spec, t, vocab_pad_multiple))


def layer_params_per_rank(spec: ModelSpec, t: int, i: int = 0) -> int:
    """Parameters of decoder layer i on one rank (norms replicated). Seed 003 table 7-8:
    one Llama 3 70B layer, 855,654,400 params, is about 1.07e8 per card at t=8."""
    return sum(w.params_per_rank for w in layer_weights(spec, t, i))
