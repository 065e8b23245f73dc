"""Memory report: activations (paper formula and exact model), logits, model states per rank."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from msgspec.structs import replace

from tpcalc.calc.activations.paper import logits, paper_activations
from tpcalc.calc.activations.paper_explain import (
    MODEL_EXPLANATIONS,
    logits_row_terms,
    model_terms,
)
from tpcalc.calc.params.counts import total_params
from tpcalc.calc.params.states import model_states
from tpcalc.calc.params.states_explain import states_terms
from tpcalc.calc.tp.memory import tp_memory_total
from tpcalc.calc.tp.memory_explain import total_terms
from tpcalc.choices import ActivationModel, FullRecomputeSharding
from tpcalc.reports.inputs import tp_sweep, tp_warnings
from tpcalc.reports.request import Workload
from tpcalc.specs import ModelSpec
from tpcalc.terms import Report, Row, Scalar, Term, Unit, term

if TYPE_CHECKING:
    from tpcalc.calc.activations.exact.options import ActivationOptions
    from tpcalc.calc.activations.exact.summary import ExactActivations

TOTAL = "total_bytes_per_rank"


def _exact_terms(
    a: ExactActivations, spec: ModelSpec, *, seq: int, micro_batch: int, options, explain: bool
) -> list[Term]:
    from tpcalc.calc.activations.exact.layer import layer_kind, saved_tensors
    from tpcalc.calc.activations.exact.summary_explain import activation_terms, tensor_terms

    terms = [
        t if t.label.startswith("exact") else replace(t, label=f"exact: {t.label}")
        for t in activation_terms(a)
    ]
    if explain:  # the tensors of the first layer of each kind, for --explain
        firsts: dict[str, int] = {}
        for i in range(spec.num_hidden_layers):
            firsts.setdefault(layer_kind(spec, i), i)
        for kind, i in firsts.items():
            for t in tensor_terms(saved_tensors(spec, i, seq, micro_batch, options)):
                name = re.sub(r"[^0-9a-zA-Z]+", "_", f"{kind}_{t.key}").strip("_")
                terms.append(replace(t, key=f"tensor_{name}_bytes", label=f"{kind}: {t.label}"))
    return terms


def exact_options(
    workload: Workload, t: int, kernels: ActivationOptions | None
) -> ActivationOptions:
    """The exact model's options at t: ``kernels`` (attention kernel, softmax dtype, dropout,
    fused norm and SwiGLU; their defaults if None) with the workload's SP, recompute and memory
    techniques."""
    from tpcalc.calc.activations.exact.options import ActivationOptions
    from tpcalc.calc.layout.groups import resolve_fp8_inputs
    from tpcalc.choices import RouterDtype

    m = resolve_fp8_inputs(workload.memory, workload.dtype)
    return replace(
        kernels or ActivationOptions(),
        t=t, sequence_parallel=workload.sp, recompute=workload.recompute,
        recompute_modules=m.recompute_modules, fp8_cache=m.fp8_cache,
        fp8_linear_inputs=bool(m.fp8_linear_inputs),
        moe_probs_in_act=m.moe_probs_in_act, router_dtype=RouterDtype(m.router_dtype),
        capacity_factor=m.capacity_factor,
    )  # fmt: skip


def memory_row(
    workload: Workload,
    t: int,
    *,
    full_sharding: FullRecomputeSharding = FullRecomputeSharding.paper,
    kernels: ActivationOptions | None = None,
    explain_tensors: bool = False,
) -> Row:
    """One rank's memory at tensor-parallel size t: activations + logits + model states.

    The exact model is shown beside the paper formula, with their difference, when it is the
    workload's activation model or ``kernels`` are given (``exact_options``).
    """
    spec, hw, seq, micro_batch = workload.spec, workload.hw, workload.seq, workload.micro_batch
    sp, recompute, recipe = workload.sp, workload.recompute, workload.recipe
    activations = workload.activations
    paper_act = paper_activations(spec, seq=seq, micro_batch=micro_batch, t=t, sp=sp,
                                  recompute=recompute, full_sharding=full_sharding)  # fmt: skip
    paper = model_terms(paper_act)
    exact: list[Term] = []
    echo: dict[str, Scalar] = {}
    # the activations the total counts: (row key, bytes, source)
    chosen: tuple[str, int | float, str] = (
        "activation_bytes", paper_act.activation_bytes,
        MODEL_EXPLANATIONS["activation_bytes"].source,
    )  # fmt: skip
    if kernels is not None or activations is ActivationModel.exact:
        from tpcalc.calc.activations.exact.summary import exact_activations
        from tpcalc.calc.activations.exact.summary_explain import TOTAL as EXACT_TOTAL
        from tpcalc.calc.activations.exact.summary_explain import explanations as exact_table

        opts = exact_options(workload, t, kernels)
        exact_act = exact_activations(spec, seq, micro_batch, opts)
        exact = _exact_terms(exact_act, spec, seq=seq, micro_batch=micro_batch, options=opts,
                             explain=explain_tensors)  # fmt: skip
        echo = {
            f"exact_{k}": v for k, v in opts.echo(spec).items() if k not in ("t", "sp", "recompute")
        }
        paper_total = paper_act.activation_bytes
        exact_total = float(exact_act.exact_activation_bytes)
        exact.append(term("activation_difference_bytes", "exact − paper", exact_total - paper_total,
                          Unit.bytes, formula="exact_activation_bytes − activation_bytes",
                          source="what Table 2's GPT-3 layer misses for this model",
                          exact=exact_total, paper=paper_total))  # fmt: skip
        if activations is ActivationModel.exact:  # one rank runs every layer and the head
            table = exact_table(exact_act.rope_table)
            source = f"{table[EXACT_TOTAL].source}; {table['exact_head_bytes'].source}"
            rank_bytes = exact_act.exact_activation_bytes + exact_act.exact_head_bytes
            chosen = (f"{EXACT_TOTAL} + exact_head_bytes", rank_bytes, source)
    chosen_key, chosen_bytes, chosen_source = chosen
    lg = logits(spec, seq=seq, micro_batch=micro_batch, t=t)
    logits_rows = logits_row_terms(lg)
    ms = model_states(total_params(spec), recipe, shards=t)
    states = states_terms(ms)
    parts = [
        term("activation_bytes_per_rank", f"activations ({activations.value})", chosen_bytes,
             Unit.bytes, formula=chosen_key, source=chosen_source, part_of=TOTAL),
        replace(logits_rows[-1], part_of=TOTAL),
        replace(states[-1], part_of=TOTAL),
    ]  # fmt: skip
    tail = total_terms(
        tp_memory_total(
            activation_bytes=float(chosen_bytes), logits_bytes=lg.logits_fp32_bytes_per_rank,
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
    workload: Workload,
    tp: str | int | list[int] | None = None,
    *,
    full_sharding: FullRecomputeSharding = FullRecomputeSharding.paper,
    kernels: ActivationOptions | None = None,
    explain_tensors: bool = False,
) -> Report:
    """One row per t: per-rank activation, logits and model-state bytes (tpcalc memory)."""
    tps = tp_sweep(workload, tp)
    warnings = tp_warnings(workload, tps)
    rows = tuple(
        memory_row(workload, t, full_sharding=full_sharding, kernels=kernels,
                   explain_tensors=explain_tensors)
        for t in tps
    )  # fmt: skip
    notes: tuple[str, ...] = ()
    if kernels is not None or workload.activations is ActivationModel.exact:
        notes = (
            "paper = Korthikanti et al. 2022 Table 2 (a GPT-3 layer: GeLU 4h MLP, MHA, dropout, "
            "materialised softmax); exact = the tensors autograd saves for this architecture "
            "under the listed kernel options (validated against PyTorch in "
            "tests/test_activations_measured.py).",
        )
    return Report(
        title=f"Memory per rank (TP only): {workload.spec.name}", rows=rows,
        warnings=tuple(warnings), notes=notes,
    )  # fmt: skip
