"""Data-parallel, ZeRO and pipeline reports: the Python twins of ``tpcalc dp|zero|pipeline``."""

from __future__ import annotations

import itertools

from tpcalc.calc.activations.paper import require_sp_seq
from tpcalc.calc.dp.gradients_explain import dp_terms
from tpcalc.calc.dp.zero import ZeroStage, zero_stage
from tpcalc.calc.dp.zero_explain import zero_terms
from tpcalc.calc.layout.groups import ParallelLayout
from tpcalc.calc.layout.memory import layer_activation_bytes
from tpcalc.calc.params.counts import params_for, total_params
from tpcalc.calc.params.states import recipe_bytes
from tpcalc.calc.pipeline.breakdown import pipeline_breakdown
from tpcalc.calc.pipeline.breakdown_explain import breakdown_terms
from tpcalc.choices import DDP_BUCKET_MIB, LinkChoice, ParamConvention, Schedule, TimeModel
from tpcalc.reports.inputs import int_list, pick_link, pick_nodes, positive, tp_warnings
from tpcalc.reports.request import Layout, StageSplit, Workload
from tpcalc.terms import Report, Row, Scalar
from tpcalc.units import MiB


def _base(workload: Workload, layout: Layout) -> tuple[int, dict[str, Scalar]]:
    """The node size (``--gpus-per-node`` or the card's) and the inputs every row echoes."""
    g = workload.node(layout)
    return g, {"model": workload.spec.name, "hardware": workload.hw.name, "gpus_per_node": g}


def _one_tp(workload: Workload, layout: Layout) -> tuple[int, list[str]]:
    """The layout's t, checked against the model, and the report's warnings so far."""
    t = positive(layout.tp, "--tp")
    return t, tp_warnings(workload, [t])


def dp_report(
    workload: Workload,
    layout: Layout = Layout(),
    dp: str | int | list[int] | None = None,
    *,
    bucket_mib: int = DDP_BUCKET_MIB,
    params: ParamConvention = ParamConvention.matmul,
    link: LinkChoice = LinkChoice.auto,
    with_latency: bool = True,
    time_model: TimeModel = TimeModel.roofline,
) -> Report:
    """One row per DP size (the ``dp`` sweep; ``layout`` gives tp, the micro-batches per step and
    the node size): gradient all-reduce per rank, link time, buckets, backward overlap.
    The backward it hides behind is timed by the per-operation roofline (``TimeModel.fixed``:
    4·N·tokens at the card's achieved FLOP/s, the seeds' convention).

    The DP group's ranks are ``tp`` apart (TP innermost), so it crosses nodes once dp·tp exceeds
    the GPUs per node. Tokens per rank per step = seq × micro_batch × microbatches.
    """
    spec, hw, seq, micro_batch = workload.spec, workload.hw, workload.seq, workload.micro_batch
    recipe = workload.recipe
    tp, warnings = _one_tp(workload, layout)
    g, base = _base(workload, layout)
    grad_dtype = recipe_bytes(recipe).grad_dtype
    m = positive(layout.microbatches, "--microbatches")
    tokens = seq * micro_batch * m
    backward_s = None
    if time_model is TimeModel.roofline:
        from tpcalc.calc.time.step import micro_batch_compute

        mb = micro_batch_compute(
            spec, hw, tp=tp, seq=seq, micro_batch=micro_batch, sp=workload.sp and tp > 1
        )  # fmt: skip
        backward_s = mb.backward_s * m
    rows = []
    for n in int_list(dp, "--dp", [8]):
        lk = pick_link(link, n, tp, g)
        terms = dp_terms(
            params=total_params(spec) // tp,
            flop_params=params_for(spec, params) // tp,
            tokens=tokens, n=n, hw=hw, link=lk, grad_dtype=grad_dtype,
            bucket_bytes=positive(bucket_mib, "--bucket-mib") * MiB, with_latency=with_latency,
            nodes=pick_nodes(link, n, tp, g), backward_time_s=backward_s,
        )  # fmt: skip
        echo = {**base, "time_model": time_model.value, "dp": n, "tp": tp, "seq": seq,
                "micro_batch": micro_batch,
                "microbatches": m, "tokens": tokens, "state_recipe": recipe.value,
                "grad_dtype": grad_dtype.value, "link": lk.value, "bucket_mib": bucket_mib,
                "params_convention": params.value, "latency": with_latency}  # fmt: skip
        rows.append(Row(inputs=echo, terms=terms))
    return Report(
        title=f"Data-parallel gradient all-reduce per rank per step: {spec.name}",
        rows=tuple(rows),
        warnings=tuple(warnings),
        notes=(f"gradients = all parameters{' / tp' if tp > 1 else ''}; backward = 4·N·tokens "
               f"with N '{params.value}'; buckets overlap the backward, the last cannot",),
    )  # fmt: skip


def zero_report(
    workload: Workload,
    layout: Layout = Layout(),
    dp: str | int | list[int] | None = None,
    zero: int | None = None,
    *,
    link: LinkChoice = LinkChoice.auto,
    with_latency: bool = True,
) -> Report:
    """One row per (dp, stage) at the layout's t: model states per rank, room for activations,
    comm per rank over ``layout.microbatches`` micro-batches per step. ``dp`` and ``zero`` are
    the sweeps (``layout.dp`` and ``layout.zero`` are not read); ``zero=None`` lists all four
    stages.

    Parameters per rank are the model's / t (seed 003 §7.3: 1,128.9 ÷ 8 ≈ 141 GB); activations
    are one micro-batch over all layers at that t, from the exact model or Korthikanti Table 2
    (``workload.activations``; seed 000's 45.6 GB is the paper one).
    """
    spec, hw, seq, micro_batch = workload.spec, workload.hw, workload.seq, workload.micro_batch
    recipe, sp, recompute = workload.recipe, workload.sp, workload.recompute
    t, warnings = _one_tp(workload, layout)
    g, base = _base(workload, layout)
    stages = list(ZeroStage) if zero is None else [zero_stage(zero)]
    m = positive(layout.microbatches, "--microbatches")
    rows = []
    one_rank = ParallelLayout(gpus_per_node=g, tp=t)
    per_layer = layer_activation_bytes(
        spec, one_rank, seq=seq, micro_batch=micro_batch, sp=sp, recompute=recompute,
        model=workload.activations, techniques=workload.memory,
    )  # fmt: skip
    for n, stage in itertools.product(int_list(dp, "--dp", [8]), stages):
        lk = pick_link(link, n, t, g)
        terms = zero_terms(
            params=total_params(spec) // t, recipe=recipe, stage=stage, n=n, hw=hw,
            link=lk, activation_bytes=sum(per_layer), with_latency=with_latency,
            nodes=pick_nodes(link, n, t, g), microbatches=m,
        )  # fmt: skip
        echo = {**base, "dp": n, "zero": int(stage), "tp": t, "state_recipe": recipe.value,
                "seq": seq, "micro_batch": micro_batch, "microbatches": m, "sp": sp,
                "recompute": recompute.value, "activations": workload.activations.value,
                "link": lk.value, "latency": with_latency,
                **workload.memory.echo()}  # fmt: skip
        rows.append(Row(inputs=echo, terms=terms))
    return Report(
        title=f"ZeRO model states and communication per rank: {spec.name}",
        rows=tuple(rows),
        warnings=tuple(warnings),
        notes=(f"recipe {recipe.value}: {recipe_bytes(recipe).source}",),
    )


def pipeline_report(
    workload: Workload,
    layout: Layout = Layout(microbatches=32),
    pp: str | int | list[int] | None = None,
    *,
    allow_uneven: bool = True,
    scatter_gather: bool = True,
    link: LinkChoice = LinkChoice.auto,
    with_latency: bool = True,
    split: StageSplit | None = None,
) -> Report:
    """One row per pipeline size (the ``pp`` sweep; ``layout`` gives tp, dp, the schedule, vpp,
    the micro-batches per step and the node size): layers and params per stage, p2p, bubble,
    in-flight memory. ``split``: the layers per stage set by hand, read for each pp (even
    when None).

    The pipeline group's ranks are tp·dp apart (PP outermost), so it usually crosses nodes.
    """
    from tpcalc.calc.time.pipeline_layout import split_text

    spec, seq, micro_batch = workload.spec, workload.seq, workload.micro_batch
    sp, recompute, activations = workload.sp, workload.recompute, workload.activations
    microbatches, vpp, schedule = layout.microbatches, layout.vpp, layout.schedule
    tp, warnings = _one_tp(workload, layout)
    g, base = _base(workload, layout)
    dp = positive(layout.dp, "--dp")
    if sp:
        require_sp_seq(seq, tp)
    rows = []
    per_layer = layer_activation_bytes(
        spec, ParallelLayout(tp=tp, gpus_per_node=g), seq=seq, micro_batch=micro_batch, sp=sp,
        recompute=recompute, model=activations, techniques=workload.memory,
    )  # fmt: skip
    sizes = int_list(pp, "--pp", [8])
    for p in sizes:
        lk = pick_link(link, p, tp * dp, g)
        counts = split.counts(spec.num_hidden_layers, p, vpp) if split is not None else None
        breakdown = pipeline_breakdown(
            spec, workload.hw, p=p, m=microbatches, v=vpp, schedule=schedule, seq=seq,
            micro_batch=micro_batch, tp=tp, dtype=workload.dtype, scatter_gather=scatter_gather,
            link=lk, allow_uneven=allow_uneven, layer_act_bytes=per_layer,
            with_latency=with_latency, nodes=pick_nodes(link, p, tp * dp, g), counts=counts,
        )  # fmt: skip
        terms = breakdown_terms(breakdown, workload.hw)
        echo = {**base, "pp": p, "microbatches": microbatches, "vpp": vpp,
                "schedule": schedule.value, "tp": tp, "dp": dp, "seq": seq,
                "micro_batch": micro_batch, "dtype": workload.dtype.value, "sp": sp,
                "recompute": recompute.value, "activations": activations.value,
                "uneven_allowed": allow_uneven,
                "scatter_gather": scatter_gather, "link": lk.value,
                "latency": with_latency, **(split or StageSplit()).echo(),
                "stage_split": split_text(counts), **workload.memory.echo()}  # fmt: skip
        rows.append(Row(inputs=echo, terms=terms))
    if schedule is not Schedule.gpipe and microbatches < max(sizes):
        warnings.append(
            f"microbatches={microbatches} < pp: the pipeline never fills; most of the step is idle"
        )
    return Report(
        title=f"Pipeline stages, bubble and stage-to-stage traffic: {spec.name}",
        rows=tuple(rows),
        warnings=tuple(warnings),
        notes=(
            "F, B, W from 2·N_stage·tokens FLOP each at the achieved FLOP/s of the card; "
            f"activations per layer: {activations.value} model",
        ),
    )
