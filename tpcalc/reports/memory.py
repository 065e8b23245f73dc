"""Memory report: activations (paper formula and exact model), logits, model states per rank."""

from __future__ import annotations

import re

from tpcalc.calc.activations.paper import logits, paper_activations
from tpcalc.calc.activations.paper_explain import logits_row_terms, model_terms
from tpcalc.calc.params.counts import total_params
from tpcalc.calc.params.states import model_states
from tpcalc.calc.params.states_explain import states_terms
from tpcalc.calc.tp.memory import tp_memory_total
from tpcalc.calc.tp.memory_explain import total_terms
from tpcalc.choices import ActivationModel, FullRecomputeSharding, Recompute, StateRecipe
from tpcalc.reports.inputs import resolve
from tpcalc.reports.tp import tp_warnings
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Report, Row, Scalar, Term, Unit, term

TOTAL = "total_bytes_per_rank"


def _exact_terms(spec: ModelSpec, *, seq: int, micro_batch: int, options, explain: bool):
    from tpcalc.calc.activations.exact.layer import layer_kind, saved_tensors
    from tpcalc.calc.activations.exact.summary import exact_activation_terms, tensor_terms

    terms = [
        t if t.label.startswith("exact") else t.model_copy(update={"label": f"exact: {t.label}"})
        for t in exact_activation_terms(spec, seq, micro_batch, options)
    ]
    if explain:  # the tensors of the first layer of each kind, for --explain
        firsts: dict[str, int] = {}
        for i in range(spec.num_hidden_layers):
            firsts.setdefault(layer_kind(spec, i), i)
        for kind, i in firsts.items():
            for t in tensor_terms(saved_tensors(spec, i, seq, micro_batch, options)):
                name = re.sub(r"[^0-9a-zA-Z]+", "_", f"{kind}_{t.key}").strip("_")
                terms.append(t.model_copy(update={
                    "key": f"tensor_{name}_bytes", "label": f"{kind}: {t.label}"}))  # fmt: skip
    return terms


def memory_row(
    spec: ModelSpec,
    hw: HardwareSpec,
    *,
    t: int,
    seq: int,
    micro_batch: int,
    sp: bool,
    recompute: Recompute,
    full_sharding: FullRecomputeSharding,
    recipe: StateRecipe,
    activations: ActivationModel = ActivationModel.exact,
    exact_options=None,
    explain_tensors: bool = False,
) -> Row:
    """One rank's memory at tensor-parallel size t: activations + logits + model states.

    ``exact_options`` (an ``ActivationOptions``; t, SP and recompute are filled in here) adds the
    exact model beside the paper formula, and their difference.
    """
    paper_act = paper_activations(spec, seq=seq, micro_batch=micro_batch, t=t, sp=sp,
                                  recompute=recompute, full_sharding=full_sharding)  # fmt: skip
    paper = model_terms(paper_act)
    exact: list[Term] = []
    echo: dict[str, Scalar] = {}
    if exact_options is not None or activations is ActivationModel.exact:
        from tpcalc.calc.activations.exact.options import ActivationOptions

        opts = (exact_options or ActivationOptions()).model_copy(
            update={"t": t, "sequence_parallel": sp, "recompute": recompute}
        )
        exact = _exact_terms(spec, seq=seq, micro_batch=micro_batch, options=opts,
                             explain=explain_tensors)  # fmt: skip
        echo = {
            f"exact_{k}": v for k, v in opts.echo(spec).items() if k not in ("t", "sp", "recompute")
        }
        paper_total = paper_act.activation_bytes
        exact_total = next(x.number for x in exact if x.key == "exact_activation_bytes")
        exact.append(term("activation_difference_bytes", "exact − paper", exact_total - paper_total,
                          Unit.bytes, formula="exact_activation_bytes − activation_bytes",
                          source="what Table 2's GPT-3 layer misses for this model",
                          exact=exact_total, paper=paper_total))  # fmt: skip
    chosen_key = (
        "exact_activation_bytes" if activations is ActivationModel.exact else "activation_bytes"
    )
    lg = logits(spec, seq=seq, micro_batch=micro_batch, t=t)
    logits_rows = logits_row_terms(lg)
    ms = model_states(total_params(spec), recipe, shards=t)
    states = states_terms(ms)
    picked = next(x for x in (*paper, *exact) if x.key == chosen_key)
    parts = [
        term("activation_bytes_per_rank", f"activations ({activations.value})", picked.value,
             Unit.bytes, formula=chosen_key, source=picked.source, part_of=TOTAL),
        logits_rows[-1].model_copy(update={"part_of": TOTAL}),
        states[-1].model_copy(update={"part_of": TOTAL}),
    ]  # fmt: skip
    tail = total_terms(
        tp_memory_total(
            activation_bytes=picked.number, logits_bytes=lg.logits_fp32_bytes_per_rank,
            states_bytes=ms.model_states_bytes, card_bytes=hw.memory_bytes.value,
        ),
        hw,
    )  # fmt: skip
    inputs: dict[str, Scalar] = {
        "model": spec.name, "hardware": hw.name, "t": t, "seq": seq, "micro_batch": micro_batch,
        "sp": sp, "recompute": recompute.value, "activations": activations.value,
        "full_recompute_sharding": full_sharding.value, "state_recipe": recipe.value, **echo,
    }  # fmt: skip
    terms = (*paper, *exact, *logits_rows[:-1], *states[:-1], *parts, *tail)
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
    activations: ActivationModel = ActivationModel.exact,
    exact_options=None,
    explain_tensors: bool = False,
) -> Report:
    """One row per t: per-rank activation, logits and model-state bytes (tpcalc memory)."""
    inputs = resolve(model, hardware, seq=seq, micro_batch=micro_batch, tp=tp)
    warnings = tp_warnings(inputs)
    rows = tuple(
        memory_row(
            inputs.spec, inputs.hw, t=t, seq=inputs.seq, micro_batch=inputs.micro_batch, sp=sp,
            recompute=recompute, full_sharding=full_sharding, recipe=recipe,
            activations=activations, exact_options=exact_options,
            explain_tensors=explain_tensors,
        )
        for t in inputs.tps
    )  # fmt: skip
    notes: tuple[str, ...] = ()
    if exact_options is not None or activations is ActivationModel.exact:
        notes = (
            "paper = Korthikanti et al. 2022 Table 2 (a GPT-3 layer: GeLU 4h MLP, MHA, dropout, "
            "materialised softmax); exact = the tensors autograd saves for this architecture "
            "under the listed kernel options (validated against PyTorch in "
            "tests/test_activations_measured.py).",
        )
    return Report(
        title=f"Memory per rank (TP only): {inputs.spec.name}", rows=rows,
        warnings=tuple(warnings), notes=notes,
    )  # fmt: skip
