"""Which blocks of a layer tensor parallelism splits, and the f/g collectives each one runs.

Megatron TP (Shoeybi et al. 2019 §3) puts a conjugate pair f/g around each attention and MLP
block: g all-reduces in the forward pass, f in the backward pass (seed 003 §7.3.3, seed 000's
f/g box). A light module on its own: the step model, the planner's bounds and the layout's bytes
all count blocks with ``tp_blocks``, and the step model is on every command's start-up path.
"""

from __future__ import annotations

from tpcalc.calc.params.counts import shared_expert_intermediate
from tpcalc.specs import ModelSpec

FWD_COLLECTIVES_PER_LAYER = 2  # g after attention and after the MLP (Shoeybi et al. 2019 §3)
BWD_COLLECTIVES_PER_LAYER = 2  # f before attention and before the MLP


def tp_blocks(spec: ModelSpec, moe: bool) -> int:
    """TP collective blocks of one layer per pass (each an all-reduce, or SP's all-gather +
    reduce-scatter pair): attention and MLP, 2; a MoE layer with no shared expert, 1. Its routed
    experts take the rank's sequence-parallel tokens through the token dispatcher (all-to-all
    over EP) and return them there, with no TP collective; a shared expert is a TP-split MLP
    (Megatron-Core MoELayer, SharedExpertMLP)."""
    if moe and not shared_expert_intermediate(spec):
        return FWD_COLLECTIVES_PER_LAYER - 1
    return FWD_COLLECTIVES_PER_LAYER
