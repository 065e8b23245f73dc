"""The parameter breakdown ``tpcalc show`` prints, as one typed result: the parts of the total,
then the matmul and active counts (counts from ``tpcalc.calc.params.counts``). Labels, formulas,
sources: ``breakdown_explain``."""

from __future__ import annotations

from msgspec import Struct

from tpcalc.calc.params.counts import (
    active_params,
    attention_params,
    embedding_params,
    final_norm_params,
    linear_attention_params,
    lm_head_params,
    matmul_params,
    mtp_params,
    summed_layer_parts,
)
from tpcalc.specs import ModelSpec


class ParamBreakdown(Struct, frozen=True):
    """A model's parameters by part (the parts, then the declared parts, add up to
    ``total_params``), and the matmul and active-per-token counts, which are not parts."""

    embedding_params: int
    full_attention_params: int
    linear_attention_params: int
    dense_mlp_params: int
    routed_expert_params: int
    shared_expert_params: int
    router_params: int
    norm_params: int
    final_norm_params: int
    lm_head_params: int
    mtp_params: int
    declared_params: tuple[int, ...]  # spec.tpcalc.declared_parts, in order
    total_params: int
    matmul_params: int
    active_params: int
    # the per-layer blocks the formulas substitute
    attention_block_params: int
    linear_attention_block_params: int


PARTS = (
    "embedding_params", "full_attention_params", "linear_attention_params", "dense_mlp_params",
    "routed_expert_params", "shared_expert_params", "router_params", "norm_params",
    "final_norm_params", "lm_head_params", "mtp_params",
)  # fmt: skip


def param_breakdown(spec: ModelSpec) -> ParamBreakdown:
    """Every part of ``spec``'s parameters (sources: ``breakdown_explain``); the total is the
    sum of the parts and the declared parts."""
    s = summed_layer_parts(spec)
    parts = (
        embedding_params(spec), s.full_attention, s.linear_attention, s.dense_mlp,
        s.routed_expert, s.shared_expert, s.router, s.norm,
        final_norm_params(spec), lm_head_params(spec), mtp_params(spec),
    )  # fmt: skip
    declared = tuple(d.params for d in spec.tpcalc.declared_parts)
    total = 0
    for n in (*parts, *declared):
        total += n
    return ParamBreakdown(
        *parts,
        declared_params=declared,
        total_params=total,
        matmul_params=matmul_params(spec),
        active_params=active_params(spec),
        attention_block_params=attention_params(spec),
        linear_attention_block_params=(
            linear_attention_params(spec) if spec.linear_attention_layers else 0
        ),
    )
