"""Expert parallelism, the memory side: routed experts per rank and their model states.

Each of ``ep`` ranks holds n_routed_experts/ep experts of every MoE layer (seed 000 summary:
256 routed experts / 64 cards = 4 per card per layer); their weights and optimizer states follow
the state recipe (``tpcalc.calc.params.states``), counted before ZeRO shards them. The all-to-all
side is in ``tpcalc.calc.ep.all_to_all``.
"""

from __future__ import annotations

from tpcalc.calc.params.counts import mlp_params, routed_expert_params
from tpcalc.calc.params.states import recipe_bytes
from tpcalc.choices import StateRecipe
from tpcalc.errors import InputError, divide
from tpcalc.specs import ModelSpec
from tpcalc.terms import Term, Unit, term

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


def memory_terms(spec: ModelSpec, ep: int, recipe: StateRecipe, *, etp: int = 1) -> list[Term]:
    """Routed experts, their parameters, weights and model states per rank (before ZeRO).

    Sources: ``SRC_EP`` (experts / ep), ``SRC_PARAMS`` (parameter count), the state recipe.
    """
    n_routed, _, f = require_moe(spec)
    total = routed_expert_params(spec)
    if etp < 1:
        raise InputError(f"etp={etp} must be a positive integer")
    divide(f, etp, what="moe_intermediate_size", by="etp")
    per_rank = total // (ep * etp)
    rb = recipe_bytes(recipe)
    return [
        term(
            "experts_per_rank",
            "routed experts per rank per layer",
            experts_per_rank(spec, ep),
            Unit.count,
            formula="n_routed_experts / ep",
            source=SRC_EP,
            n_routed_experts=n_routed,
            ep=ep,
        ),
        term(
            "moe_layers",
            "MoE layers",
            spec.moe_layers,
            Unit.count,
            formula="num_hidden_layers - first_k_dense_replace",
            source="model config",
            num_hidden_layers=spec.num_hidden_layers,
            first_k_dense_replace=spec.first_k_dense_replace,
        ),
        term(
            "routed_expert_params",
            "routed-expert parameters",
            total,
            Unit.params,
            formula="L_moe·E·expert_params",
            source=SRC_PARAMS,
            L_moe=spec.moe_layers,
            E=n_routed,
            expert_params=mlp_params(spec, f),
        ),
        term(
            "routed_expert_params_per_rank",
            "routed-expert parameters per rank",
            per_rank,
            Unit.params,
            formula="routed_expert_params / (ep·etp)",
            source=f"{SRC_EP}; Megatron-Core expert tensor parallel splits each expert by etp",
            ep=ep,
            etp=etp,
        ),
        term(
            "expert_weights_bytes_per_rank",
            "expert weights per rank",
            per_rank * rb.weight_bytes,
            Unit.bytes,
            formula="params_per_rank·weight_bytes",
            source=rb.source,
            weight_bytes=rb.weight_bytes,
            recipe=recipe.value,
        ),
        term(
            "expert_states_bytes_per_rank",
            "expert model states per rank (before ZeRO)",
            per_rank * rb.total_bytes,
            Unit.bytes,
            formula="params_per_rank·bytes_per_param",
            source=rb.source,
            bytes_per_param=rb.total_bytes,
            recipe=recipe.value,
        ),
    ]
