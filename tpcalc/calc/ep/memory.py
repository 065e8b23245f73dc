"""Expert parallelism, the memory side: routed experts per rank and their model states.

Each of ``ep`` ranks holds n_routed_experts/ep experts of every MoE layer (seed 000 summary:
256 routed experts / 64 cards = 4 per card per layer); their weights and optimizer states follow
the state recipe (``tpcalc.calc.params.states``), counted before ZeRO shards them. The all-to-all
side is in ``tpcalc.calc.ep.all_to_all``.
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.calc.params.counts import mlp_params, routed_expert_params
from tpcalc.calc.params.states import recipe_bytes
from tpcalc.choices import StateRecipe
from tpcalc.errors import InputError, divide
from tpcalc.specs import ModelSpec

SRC_EP = "seed 000 summary (EP): 256 routed experts / 64 cards = 4 per card per layer"
SRC_PARAMS = (
    "tpcalc.calc.params.counts.routed_expert_params; seed 000: 58 × 256 × 3 × 7168 × 2048 = 654B"
)


def require_moe(spec: ModelSpec) -> tuple[int, int, int]:
    """(n_routed_experts, num_experts_per_tok, moe_intermediate_size), or InputError if dense."""
    if not spec.is_moe or spec.num_experts_per_tok is None or spec.moe_intermediate_size is None:
        raise InputError(
            f"model {spec.name} has no routed experts (n_routed_experts is unset): "
            "expert parallelism needs an MoE model (e.g. -m deepseek-v3, or a MoE config.json)"
        )
    return spec.n_routed_experts or 0, spec.num_experts_per_tok, spec.moe_intermediate_size


def experts_per_rank(spec: ModelSpec, ep: int) -> int:
    """Routed experts each rank holds per MoE layer: n_routed_experts / ep (exact)."""
    n_routed, _, _ = require_moe(spec)
    return divide(n_routed, ep, what="n_routed_experts", by="ep")


class ExpertMemory(Struct, frozen=True):
    """Routed experts, their parameters, weights and model states on one rank (before ZeRO).

    Labels, formulas and sources: ``tpcalc.calc.ep.all_to_all_explain``."""

    ep: int
    etp: int
    recipe: StateRecipe
    n_routed_experts: int
    expert_params: int  # one expert's MLP
    weight_bytes_per_param: float
    state_bytes_per_param: float
    experts_per_rank: int
    moe_layers: int
    routed_expert_params: int
    routed_expert_params_per_rank: int
    expert_weights_bytes_per_rank: float
    expert_states_bytes_per_rank: float


def expert_memory(spec: ModelSpec, ep: int, recipe: StateRecipe, *, etp: int = 1) -> ExpertMemory:
    """E/ep experts per rank; L_moe·E·expert_params routed parameters, 1/(ep·etp) of them per
    rank, at the recipe's bytes per parameter.

    Sources: ``SRC_EP`` (experts / ep), ``SRC_PARAMS`` (parameter count), the state recipe.
    """
    n_routed, _, f = require_moe(spec)
    total = routed_expert_params(spec)
    if etp < 1:
        raise InputError(f"etp={etp} must be a positive integer")
    divide(f, etp, what="moe_intermediate_size", by="etp")
    per_rank = total // (ep * etp)
    rb = recipe_bytes(recipe)
    return ExpertMemory(
        ep=ep,
        etp=etp,
        recipe=recipe,
        n_routed_experts=n_routed,
        expert_params=mlp_params(spec, f),
        weight_bytes_per_param=rb.weight_bytes,
        state_bytes_per_param=rb.total_bytes,
        experts_per_rank=experts_per_rank(spec, ep),
        moe_layers=spec.moe_layers,
        routed_expert_params=total,
        routed_expert_params_per_rank=per_rank,
        expert_weights_bytes_per_rank=per_rank * rb.weight_bytes,
        expert_states_bytes_per_rank=per_rank * rb.total_bytes,
    )
