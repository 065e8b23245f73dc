"""Memory report: activations (Korthikanti Table 2), logits and model states per rank."""

from __future__ import annotations

from tpcalc.calc.activations import (
    FullRecomputeSharding,
    Recompute,
    logits_terms,
    paper_model_terms,
)
from tpcalc.calc.params import total_params
from tpcalc.calc.states import StateRecipe, model_states_terms
from tpcalc.reports.inputs import resolve
from tpcalc.reports.tp import tp_warnings
from tpcalc.terms import Report, Row, Scalar, Term, Unit, term


def memory_row(
    inputs_spec,
    hw,
    *,
    t: int,
    seq: int,
    micro_batch: int,
    sp: bool,
    recompute: Recompute,
    full_sharding: FullRecomputeSharding,
    recipe: StateRecipe,
) -> Row:
    """One rank's memory at tensor-parallel size t: activations + logits + model states."""
    spec = inputs_spec
    acts = paper_model_terms(
        spec,
        seq=seq,
        micro_batch=micro_batch,
        t=t,
        sp=sp,
        recompute=recompute,
        full_sharding=full_sharding,
    )
    logits = logits_terms(spec, seq=seq, micro_batch=micro_batch, t=t)
    states = model_states_terms(total_params(spec), recipe, shards=t)
    parts = [
        x[-1].model_copy(update={"part_of": "total_bytes_per_rank"}) for x in (acts, logits, states)
    ]
    total = sum(float(p.value) for p in parts)
    card = hw.memory_bytes.value
    tail: list[Term] = [
        term(
            "total_bytes_per_rank",
            "total",
            total,
            Unit.bytes,
            formula="activations + logits + model states (no ZeRO/DP: see tpcalc zero)",
            source="sum of the parts",
        ),
        term(
            "card_bytes",
            "card",
            card,
            Unit.bytes,
            formula="hardware config",
            source=hw.memory_bytes.source,
        ),
        term(
            "free_bytes",
            "free",
            card - total,
            Unit.bytes,
            formula="card − total",
            source="seed 000 (80 GB − 55.6 GB = 24.4 GB left for activations)",
        ),
        term("fits", "fits", total <= card, Unit.text, formula="total ≤ card"),
    ]
    inputs: dict[str, Scalar] = {
        "model": spec.name,
        "hardware": hw.name,
        "t": t,
        "seq": seq,
        "micro_batch": micro_batch,
        "sp": sp,
        "recompute": recompute.value,
        "activations": "paper",
        "full_recompute_sharding": full_sharding.value,
        "state_recipe": recipe.value,
    }
    terms = (*acts[:-1], parts[0], *logits[:-1], parts[1], *states[:-1], parts[2], *tail)
    return Row(inputs=inputs, terms=terms)


def memory_report(
    model: str,
    hardware: str,
    *,
    tp: str | int | list[int] | None = None,
    seq: int | None = None,
    micro_batch: int = 1,
    sp: bool = True,
    recompute: Recompute = Recompute.selective,
    full_sharding: FullRecomputeSharding = FullRecomputeSharding.paper,
    recipe: StateRecipe = StateRecipe.zero16,
) -> Report:
    """One row per t: per-rank activation, logits and model-state bytes (tpcalc memory)."""
    inputs = resolve(model, hardware, seq=seq, micro_batch=micro_batch, tp=tp)
    warnings = tp_warnings(inputs)
    rows = tuple(
        memory_row(
            inputs.spec,
            inputs.hw,
            t=t,
            seq=inputs.seq,
            micro_batch=inputs.micro_batch,
            sp=sp,
            recompute=recompute,
            full_sharding=full_sharding,
            recipe=recipe,
        )
        for t in inputs.tps
    )
    return Report(
        title=f"Memory per rank (TP only): {inputs.spec.name}",
        rows=rows,
        warnings=tuple(warnings),
    )
