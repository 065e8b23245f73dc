"""Label, formula and source of every ``StateParts`` and ``ModelStates`` field (the explain
layer beside ``states.py``), and their conversion to ``Term`` rows (``tpcalc memory``,
``tpcalc zero``)."""

from __future__ import annotations

from tpcalc.calc.params.states import ModelStates, StateParts, model_states, recipe_bytes
from tpcalc.choices import StateRecipe
from tpcalc.explain import Explanation, terms
from tpcalc.terms import Scalar, Term, Unit

STATES_TOTAL = "model_states_bytes"
# (row, label, the per-parameter field its formula names, the divisor field) of each part.
PARTS = (
    ("weights_bytes", "weights", "weight_bytes", "weights_divisor"),
    ("grads_bytes", "gradients", "grad_bytes", "grads_divisor"),
    ("optimizer_bytes", "optimizer (master + Adam m, v)", "optimizer_bytes",
     "optimizer_divisor"),
)  # fmt: skip


def part_explanations(source: str, total: str = STATES_TOTAL) -> dict[str, Explanation]:
    """The explain table of ``StateParts``: the three rows, parts of ``total``, then the inputs."""
    rows = {
        row: Explanation(label, Unit.bytes, f"N × {field} / d", source, total)
        for row, label, field, _ in PARTS
    }
    inputs = {
        "params": Explanation("N", Unit.params, "parameters this rank's group holds", source),
        "weight_bytes_per_param": Explanation(
            "weight bytes per parameter", Unit.bytes,
            "bytes(weight dtype); FP8 weights: copies × (1 + scale bytes per element)", source,
        ),
        "grad_bytes_per_param": Explanation(
            "gradient bytes per parameter", Unit.bytes, "bytes(grad dtype)", source
        ),
        "optimizer_bytes_per_param": Explanation(
            "optimizer bytes per parameter", Unit.bytes, "master + 2 Adam moments", source
        ),
        **{
            divisor: Explanation(
                f"{label} divisor", Unit.count, "t, or ZeRO's stage divisor", source
            )
            for _, label, _, divisor in PARTS
        },
    }  # fmt: skip
    return {**rows, **inputs}


def part_terms(p: StateParts, source: str, total: str = STATES_TOTAL) -> tuple[Term, ...]:
    """The three part rows, N × bytes / d each, parts of ``total``."""
    table = part_explanations(source, total)
    symbols: dict[str, dict[str, Scalar]] = {
        row: {"N": p.params, field: getattr(p, f"{field}_per_param"), "d": getattr(p, divisor)}
        for row, _, field, divisor in PARTS
    }
    return terms(p, {row: table[row] for row, _, _, _ in PARTS}, symbols=symbols)


def explanations(recipe: StateRecipe) -> dict[str, Explanation]:
    """The explain table of ``ModelStates`` (sources: the recipe)."""
    src = recipe_bytes(recipe).source
    return {
        STATES_TOTAL: Explanation(
            "model states", Unit.bytes, "N/shards × bytes_per_param", src
        ),
        "shards": Explanation("shards", Unit.count, "model-parallel split (t)", src),
        "bytes_per_param": Explanation(
            "bytes per parameter", Unit.bytes, "weight + grad + optimizer", src
        ),
    }  # fmt: skip


def states_terms(m: ModelStates) -> tuple[Term, ...]:
    """The three parts, then the model states total."""
    src = recipe_bytes(m.recipe).source
    symbols: dict[str, dict[str, Scalar]] = {
        STATES_TOTAL: {
            "N": m.parts.params, "shards": m.shards, "bytes_per_param": m.bytes_per_param
        }
    }  # fmt: skip
    total = terms(m, {STATES_TOTAL: explanations(m.recipe)[STATES_TOTAL]}, symbols=symbols)
    return (*part_terms(m.parts, src), *total)


def model_states_terms(params: int, recipe: StateRecipe, *, shards: int = 1) -> tuple[Term, ...]:
    """``model_states`` with its explanations: weights + gradients + optimizer = model states."""
    return states_terms(model_states(params, recipe, shards=shards))
