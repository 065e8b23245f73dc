"""Label, formula and source of every ``ZeroStates`` and ``ZeroComm`` field (the explain layer
beside ``zero.py``), and their conversion to the ``Term`` rows ``tpcalc zero`` prints."""

from __future__ import annotations

from tpcalc.calc.dp.zero import (
    ZERO_COMM_SOURCE,
    ZERO_MEM_SOURCE,
    ZeroComm,
    ZeroStage,
    ZeroStates,
    zero_comm,
    zero_states,
)
from tpcalc.calc.links.link import LATENCY_FORMULA, Link, latency_inputs, latency_source
from tpcalc.calc.params.states import recipe_bytes
from tpcalc.calc.params.states_explain import STATES_TOTAL, part_terms
from tpcalc.choices import StateRecipe
from tpcalc.explain import Explanation, terms
from tpcalc.specs import HardwareSpec
from tpcalc.terms import Scalar, Term, Unit

COMM_TOTAL = "comm_send_bytes_per_rank"
# Label and formula of each part of ``ZeroCommParts``, by the names of ``COMM_COLLECTIVES``.
COMM_LABELS = {
    "all_reduce_grads": ("all-reduce gradients", "2(n-1)/n × N × grad_bytes"),
    "reduce_scatter_grads": (
        "reduce-scatter gradients",
        "(m at ZeRO-2/3, else 1) × (n-1)/n × N × grad_bytes",
    ),
    "all_gather_params_update": ("all-gather updated params", "(n-1)/n × N × weight_bytes"),
    "all_gather_params_fwd": ("all-gather params (forward)", "m × (n-1)/n × N × weight_bytes"),
    "all_gather_params_bwd": ("all-gather params (backward)", "m × (n-1)/n × N × weight_bytes"),
}
SRC_RATIO = "seed 000 summary (444.5 GB = 5.6 × 80 GB)"
SRC_FREE = "seed 000 summary (80 - 55.6 = 24.4 GB)"
STATES_ROWS = (STATES_TOTAL, "states_over_memory_ratio", "free_for_activations_bytes")
ACTIVATION_ROWS = ("activation_bytes", "activations_fit")
COMM_ROWS = (COMM_TOTAL, "comm_time_s", "comm_vs_dp_ratio")


def states_source(recipe: StateRecipe) -> str:
    """ZeRO's partitioning and the recipe's bytes per parameter."""
    return ZERO_MEM_SOURCE + f"; recipe {recipe.value}: {recipe_bytes(recipe).source}"


def states_explanations(recipe: StateRecipe) -> dict[str, Explanation]:
    """The explain table of ``ZeroStates`` (its parts: ``states_explain.part_explanations``)."""
    src = states_source(recipe)
    return {
        STATES_TOTAL: Explanation(
            "model states per rank", Unit.bytes, "weights + grads + optimizer", src
        ),
        "states_over_memory_ratio": Explanation(
            "model states / card memory", Unit.ratio, "model_states / memory", SRC_RATIO
        ),
        "free_for_activations_bytes": Explanation(
            "left for activations", Unit.bytes, "memory - model_states", SRC_FREE
        ),
        "activation_bytes": Explanation(
            "activations (given)", Unit.bytes, "the caller's activations per rank",
            "e.g. Korthikanti et al. 2022 Table 2 (tpcalc.calc.activations.paper)",
        ),
        "activations_fit": Explanation(
            "activations fit", Unit.text, "activations <= memory - model_states",
            "seed 000 summary (45.6 GB does not fit in 24.4 GB)",
        ),
        "n": Explanation("n", Unit.count, "data-parallel size", ZERO_MEM_SOURCE),
        "memory_bytes": Explanation("card memory", Unit.bytes, "hardware config", src),
    }  # fmt: skip


def parts_explanations() -> dict[str, Explanation]:
    """The explain table of ``ZeroCommParts``: one collective per field."""
    return {
        f"{key}_bytes": Explanation(label, Unit.bytes, formula, ZERO_COMM_SOURCE, COMM_TOTAL)
        for key, (label, formula) in COMM_LABELS.items()
    }


def comm_explanations(hw: HardwareSpec, link: Link, with_latency: bool) -> dict[str, Explanation]:
    """The explain table of ``ZeroComm``: one row per collective, then the total, its time on
    ``link`` and the ratio to plain DP."""
    collectives = {
        f"{key}_send_bytes": Explanation(label, Unit.bytes, formula, ZERO_COMM_SOURCE, COMM_TOTAL)
        for key, (label, formula) in COMM_LABELS.items()
    }
    link_src = f"{hw.name} {link.value}: alpha-beta model (seed 003 table 7-7); "
    return {
        **collectives,
        COMM_TOTAL: Explanation(
            "sent per rank per step", Unit.bytes, "sum of the collectives", ZERO_COMM_SOURCE
        ),
        "comm_time_s": Explanation(
            f"comm time on {link.value}", Unit.seconds, f"bytes / bandwidth + {LATENCY_FORMULA}",
            link_src + latency_source(hw, with_latency),
        ),
        "comm_vs_dp_ratio": Explanation(
            "comm / plain DP", Unit.ratio, "comm / comm(stage 0)", ZERO_COMM_SOURCE
        ),
        "n": Explanation("n", Unit.count, "data-parallel size", ZERO_COMM_SOURCE),
        "microbatches": Explanation(
            "m", Unit.count, "micro-batches per step (--microbatches)", ZERO_COMM_SOURCE
        ),
        "params": Explanation(
            "N", Unit.params, "parameters the group replicates", ZERO_COMM_SOURCE
        ),
        "grad_bytes_per_param": Explanation(
            "gradient bytes per parameter", Unit.bytes, "the state recipe", ZERO_COMM_SOURCE
        ),
        "weight_bytes_per_param": Explanation(
            "weight bytes per parameter", Unit.bytes, "the state recipe", ZERO_COMM_SOURCE
        ),
        "dp_send_bytes_per_rank": Explanation(
            "plain DP sent per rank", Unit.bytes, "comm(stage 0)", ZERO_COMM_SOURCE
        ),
        "nodes": Explanation(
            "nodes the group spans", Unit.count, "link_nodes(link, n) or the layout's",
            "tpcalc.calc.links.link",
        ),
        "with_latency": Explanation("latency", Unit.text, "--latency", LATENCY_FORMULA),
    }  # fmt: skip


def states_terms(z: ZeroStates) -> tuple[Term, ...]:
    """The three parts, the total, its share of the card and the room left; the given
    activations and whether they fit when there are any."""
    table = states_explanations(z.recipe)
    mem, states = z.memory_bytes, z.model_states_bytes
    symbols: dict[str, dict[str, Scalar]] = {
        STATES_TOTAL: {"N": z.parts.params, "n": z.n, "stage": int(z.stage)},
        "states_over_memory_ratio": {"model_states": states, "memory": mem},
        "free_for_activations_bytes": {"memory": mem, "model_states": states},
        "activations_fit": {"activations": z.activation_bytes, "memory": mem,
                            "model_states": states},
    }  # fmt: skip
    rows = STATES_ROWS + (ACTIVATION_ROWS if z.activation_bytes is not None else ())
    return (
        *part_terms(z.parts, states_source(z.recipe)),
        *terms(z, {k: table[k] for k in rows}, symbols=symbols),
    )


def comm_terms(c: ZeroComm, hw: HardwareSpec) -> tuple[Term, ...]:
    """One row per collective (every stage lists all five), the total, time and DP ratio."""
    table = comm_explanations(hw, c.link, c.with_latency)
    per_collective: dict[str, Scalar] = {
        "n": c.n, "N": c.params, "grad_bytes": c.grad_bytes_per_param,
        "weight_bytes": c.weight_bytes_per_param, "m": c.microbatches,
    }  # fmt: skip
    symbols: dict[str, dict[str, Scalar]] = {
        **{f"{key}_send_bytes": per_collective for key in COMM_LABELS},
        COMM_TOTAL: {"stage": int(c.stage), "n": c.n},
        "comm_time_s": {
            "bytes": c.comm_send_bytes_per_rank, "nodes": c.nodes,
            **latency_inputs(hw, c.latency_steps, c.with_latency),
        },
        "comm_vs_dp_ratio": {
            "comm": c.comm_send_bytes_per_rank, "dp_comm": c.dp_send_bytes_per_rank
        },
    }  # fmt: skip
    rows = (*(f"{key}_send_bytes" for key in COMM_LABELS), *COMM_ROWS)
    return terms(c, {k: table[k] for k in rows}, symbols=symbols)


def zero_terms(
    *,
    params: int,
    recipe: StateRecipe,
    stage: ZeroStage,
    n: int,
    hw: HardwareSpec,
    link: Link,
    activation_bytes: float | None = None,
    with_latency: bool = False,
    nodes: int | None = None,
    microbatches: int = 1,
) -> tuple[Term, ...]:
    """The rows of ``tpcalc zero`` for one (t, dp, stage): ``zero_states`` then ``zero_comm``
    with their explanations. ``params`` are the parameters this rank's data-parallel group
    replicates (the whole model without TP/PP; a model-parallel shard otherwise)."""
    z = zero_states(
        params=params, recipe=recipe, stage=stage, n=n, hw=hw, activation_bytes=activation_bytes
    )
    c = zero_comm(
        params, recipe, stage, n, hw, link, with_latency=with_latency, nodes=nodes,
        microbatches=microbatches,
    )  # fmt: skip
    return (*states_terms(z), *comm_terms(c, hw))
