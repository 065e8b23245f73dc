"""Per-card shard table and per-rank parameter counts (seed 003 §7.3.4 and table 7-8).

Declared parts (a vision tower) are EXCLUDED from every per-rank count: tpcalc knows only their
total, not their shapes, so it cannot shard them; ``excluded_declared_params`` reports them.
At t=1 with vocab pad multiple 1, ``per_rank_params`` is therefore the model total minus the
declared parts.
"""

from __future__ import annotations

from fractions import Fraction

from msgspec import Struct

from tpcalc.calc.tp.rules import Split
from tpcalc.calc.tp.weights import layer_weights, model_weights
from tpcalc.choices import DEFAULT_VOCAB_PAD_MULTIPLE
from tpcalc.specs import ModelSpec


def exact(x: Fraction) -> int | float:
    """An int when the fraction is whole, else a float."""
    return int(x) if x.denominator == 1 else float(x)


class BlockParams(Struct, frozen=True):
    """Parameters one rank holds of one block (embedding, attention, mlp, ...)."""

    block: str
    params_per_rank: int


class RankParams(Struct, frozen=True):
    """Parameters one rank holds after TP: the total, its parts by block, and what sits
    inside the total (replicated weights, KV replicas, vocab padding) or outside it (declared
    parts, whose shapes tpcalc does not know)."""

    t: int
    weights: int  # weight matrices and vectors counted
    params_per_rank: int
    blocks: tuple[BlockParams, ...]  # parts of params_per_rank, in weight order
    replicated_params_per_rank: int
    kv_replica_params_per_rank: int | float
    vocab_padding_params: int  # all ranks together
    excluded_declared_params: int


def rank_params(
    spec: ModelSpec, t: int, *, vocab_pad_multiple: int = DEFAULT_VOCAB_PAD_MULTIPLE
) -> RankParams:
    """Parameters one rank holds after TP: Σ instances · shard size over every weight, by block;
    replicated weights, the extra of replicated K/V heads over an even split, the vocab padding
    (V_pad − V)·h per vocab matrix, and the declared parts left out.
    Source: seed 003 table 7-8; Megatron-LM layers.py."""
    ws = model_weights(spec, t, vocab_pad_multiple)
    blocks: dict[str, int] = {}
    for w in ws:
        blocks[w.block] = blocks.get(w.block, 0) + w.params_per_rank
    return RankParams(
        t=t,
        weights=len(ws),
        params_per_rank=sum(w.params_per_rank for w in ws),
        blocks=tuple(BlockParams(block, n) for block, n in blocks.items()),
        replicated_params_per_rank=sum(
            w.params_per_rank for w in ws if w.split is Split.replicated
        ),
        kv_replica_params_per_rank=sum(
            w.params_per_rank - exact(Fraction(w.params * w.instances, t))
            for w in ws
            if w.replicas > 1
        ),
        vocab_padding_params=sum(
            (w.shard_params * t - w.params) * w.instances for w in ws if w.split is Split.vocab
        ),
        excluded_declared_params=sum(p.params for p in spec.tpcalc.declared_parts),
    )


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
