"""Combined-layout report: the Python twin of ``tpcalc layout``.

``layout_report`` builds the calculators' layout and run from the request (``Layout.parallel``,
``Workload.run``) and prices them with ``tpcalc.calc.layout.price.price_layout``; a published
example with the same model and sizes contributes its cited MFU and a note on its workload.
``price_report`` turns the typed ``LayoutPrice`` into the report: one row per dimension (tp, cp,
pp, dp, ep) and a summary row. The summary row holds the per-rank memory of the most loaded
pipeline rank against the card, the step time, and an MFU estimate beside the measured MFU a
source cites, when there is one. Every assumption is an input of the rows (schedule,
micro-batches, recompute, recipe, dtype, overlap per dimension, the achieved FLOP/s of the
hardware config).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec.structs import replace

from tpcalc.choices import TimeModel
from tpcalc.errors import InputError
from tpcalc.reports.request import Layout, Workload
from tpcalc.terms import Report, Row, Scalar

if TYPE_CHECKING:
    from tpcalc.calc.layout.groups import LayoutRun, ParallelLayout
    from tpcalc.calc.layout.price import LayoutPrice
    from tpcalc.calc.layout.summary import Cited
    from tpcalc.calc.time.step import StepTime, TimeOptions
    from tpcalc.specs import HardwareSpec, ModelSpec


def layout_report(
    workload: Workload,
    layout: Layout,
    *,
    allow_uneven: bool = True,
    with_latency: bool = True,
    time_model: TimeModel = TimeModel.roofline,
    time_options: TimeOptions | None = None,
    ops: bool = False,
) -> Report:
    """Price ``workload`` on ``layout``; a published example with the same model and sizes
    contributes its cited MFU and a note on its workload. ``time_options`` are the step model's
    overlaps and stage balance (``TimeOptions()``: Megatron's defaults). ``ops`` returns the
    slowest stage's operations instead (``tpcalc layout --ops``)."""
    from tpcalc.calc.layout.examples import matching_example
    from tpcalc.calc.time.step import TimeOptions

    spec, hw = workload.spec, workload.hw
    parallel = layout.parallel(workload.node(layout))
    run = workload.run(layout, with_latency=with_latency)
    options = time_options if time_options is not None else TimeOptions()
    if options.overlap.ep_a2a:
        from tpcalc.calc.time.step import ep_overlap_problem

        problem = ep_overlap_problem(spec, parallel, run, options)
        if problem is not None:
            raise InputError(
                f"--ep-overlap: Megatron-Core refuses the EP all-to-all overlap here ({problem}); "
                "change that or drop --ep-overlap"
            )
    if ops:
        from tpcalc.calc.layout.groups import check_layout
        from tpcalc.calc.time.step import step_time

        check_layout(spec, parallel, run, allow_uneven=allow_uneven)
        return ops_report(spec.name, step_time(spec, hw, parallel, run, options))
    example = matching_example(spec.name, parallel, hw.name)
    report = parallel_layout_report(
        spec, hw, parallel, run, cited=example.cited if example else None,
        allow_uneven=allow_uneven, time_model=time_model, time_options=options,
    )  # fmt: skip
    if workload.warnings:  # the defaulted sequence length
        report = replace(report, warnings=(*workload.warnings, *report.warnings))
    if example is None:
        return report
    note = (
        f"published layout {example.name}: seq {example.seq}, {example.microbatches} "
        f"micro-batches per step ({example.source})"
    )
    return replace(report, notes=(*report.notes, note))


def parallel_layout_report(
    spec: ModelSpec,
    hw: HardwareSpec,
    layout: ParallelLayout,
    run: LayoutRun,
    *,
    cited: Cited | None = None,
    allow_uneven: bool = True,
    time_model: TimeModel = TimeModel.roofline,
    time_options: TimeOptions | None = None,
) -> Report:
    """``price_layout`` of the calculators' layout and run, as the report (``price_report``)."""
    from tpcalc.calc.layout.price import price_layout

    return price_report(
        price_layout(
            spec,
            hw,
            layout,
            run,
            cited=cited,
            allow_uneven=allow_uneven,
            time_model=time_model,
            time_options=time_options,
        )  # fmt: skip
    )


def _inputs(spec: ModelSpec, hw: HardwareSpec, lay: ParallelLayout, run: LayoutRun) -> dict:
    """The inputs every row of the layout echoes."""
    return {
        "model": spec.name, "hardware": hw.name, "world_size": lay.world,
        "gpus_per_node": lay.gpus_per_node, "tp": lay.tp, "cp": lay.cp, "pp": lay.pp,
        "dp": lay.dp, "ep": lay.ep, "zero": int(lay.zero), "seq": run.seq,
        "micro_batch": run.micro_batch, "microbatches": run.microbatches,
        "schedule": run.schedule.value, "vpp": run.vpp, "recipe": run.recipe.value,
        "sp": run.sp, "recompute": run.recompute.value, "activations": run.activations.value,
        "dtype": run.dtype.value,
        "latency": run.with_latency, "etp": lay.etp, **run.memory.echo(),
    }  # fmt: skip


def time_inputs(
    hw: HardwareSpec, opts: TimeOptions, split: tuple[int, ...] | None = None
) -> dict[str, Scalar]:
    """Every assumption of the step-time model, as row inputs (table, JSON and CSV); ``split``:
    the layers of each virtual stage when set by hand (``step.hand_split``)."""
    ov = opts.overlap
    from tpcalc.calc.time.roofline import comm_sm_share

    perf = hw.performance
    scale = perf.fitted.compute_scale.value if perf else None
    comm_sms = comm_sm_share(perf) if perf else None
    moe_c = perf.fitted.moe_layer_overhead_s if perf else None
    moe_fit = perf.fitted.moe_fit_tokens if perf else None
    return {
        "time_model": "roofline",
        "tp_comm_overlap": ov.tp_comm,
        "cp_overlap": ov.cp_ring,
        "ep_overlap": "auto" if ov.ep_a2a is None else ov.ep_a2a,
        "pp_overlap": ov.pp_p2p,
        "pp_scatter_gather": opts.pp_scatter_gather,
        "dp_overlap": ov.dp_grad_reduce and ov.dp_param_gather,
        "causal": opts.causal,
        "attention_flops": "causal" if opts.causal_model_flops else "full",
        "fused_sinks": opts.fused_sinks,
        **split_inputs(opts, split),
        "recompute_layers": opts.recompute_layers,
        "ep_dispatch": "node-aware" if opts.ep_node_dedup else "all-to-all",
        "compute_scale": scale,
        "comm_sm_share": comm_sms,  # the SMs an overlapped collective takes from compute
        # the fitted MoE constant per layer and pass, and the tokens per rank past which it
        # grows with the tokens (roofline.moe_layer_overhead)
        "moe_layer_overhead_s": moe_c.value if moe_c else None,
        "moe_fit_tokens_high": moe_fit.high if moe_fit else None,
    }


def split_inputs(opts: TimeOptions, split: tuple[int, ...] | None) -> dict[str, Scalar]:
    """How the layers were split over the virtual stages, as row inputs under either time
    model (the memory columns place each stage's layers by it too)."""
    from tpcalc.calc.time.pipeline_layout import split_text

    return {
        "first_stage_layers": opts.first_stage_layers,
        "last_stage_layers": opts.last_stage_layers,
        "embedding_in_split": opts.embedding_in_split,
        "loss_in_split": opts.loss_in_split,
        "stage_layers": split_text(split),
    }


def price_report(p: LayoutPrice) -> Report:
    """One row per dimension (tp, cp, pp, dp, ep) and the summary row, each with the inputs
    of the layout, under the labels, formulas and sources of the explain modules."""
    from tpcalc.calc.layout.comm_explain import dimension_terms
    from tpcalc.calc.layout.memory_explain import layout_memory_terms
    from tpcalc.calc.layout.summary import FixedStepSummary
    from tpcalc.calc.layout.summary_explain import fixed_summary_terms
    from tpcalc.calc.layout.timed_explain import ROOFLINE_COMM, roofline_summary_terms
    from tpcalc.calc.time.step import TimeOptions, hand_split

    spec, hw, layout, run = p.spec, p.hw, p.layout, p.run
    inputs = _inputs(spec, hw, layout, run)
    lat = run.with_latency
    opts = p.time_options or TimeOptions()
    split = hand_split(opts, spec.num_hidden_layers, layout.pp, run.vpp)
    if isinstance(p.summary, FixedStepSummary):
        inputs = {**inputs, "time_model": TimeModel.fixed.value, **split_inputs(opts, split)}
        timed_by = None
        summary = fixed_summary_terms(p.summary, hw)
    else:
        inputs = {**inputs, **time_inputs(hw, opts, split)}
        timed_by = ROOFLINE_COMM
        summary = roofline_summary_terms(p.summary)
    rows = [
        Row(
            inputs={**inputs, "dimension": d},
            terms=dimension_terms(p.groups[d], cost, spec, hw, lat, timed_by),
        )
        for d, cost in p.costs.by_dimension()
    ]
    summary += layout_memory_terms(p.memory, hw, run.activations)
    rows.append(Row(inputs={**inputs, "dimension": "total"}, terms=tuple(summary)))
    return Report(
        title=(
            f"{spec.name} on {layout.world} × {hw.name}: [TP, CP, PP, DP] = {layout.tp} × "
            f"{layout.cp} × {layout.pp} × {layout.dp}, EP {layout.ep}, ZeRO-{int(layout.zero)}"
        ),
        rows=tuple(rows),
        warnings=p.warnings,
    )


def ops_report(model: str, st: StepTime) -> Report:
    """``tpcalc layout --ops``: one row per op of the bottleneck stage, in execution order
    within each pass (terms: ``calc.time.ops_explain.op_terms``); under DualPipe, of both
    stages the bottleneck rank runs (``step.dualpipe_ranks``), each for half the
    micro-batches."""
    from tpcalc.calc.time.ops_explain import OPS_LEGEND, op_terms

    rank = st.bottleneck_stage
    other = len(st.stages) - 1 - rank
    rows = tuple(
        Row(
            inputs={
                "model": model,
                "stage": stage,
                "op": ot.op.name,
                "pass": ot.op.phase.value,
                "fp8": ot.op.fp8,
                "layers": ot.count,
            },
            terms=op_terms(ot),
        )  # fmt: skip
        for stage, ops in ((rank, st.bottleneck_ops), (other, st.paired_ops))
        for ot in ops
    )
    what = f"pipeline stage {rank} (the slowest), one micro-batch"
    if st.paired_ops:
        what = (
            f"pipeline rank {rank} (the slowest) under DualPipe: stages {rank} and {other}, "
            "each run by half the micro-batches; one micro-batch of each"
        )
    return Report(title=f"{model}: operations of {what}", rows=rows, notes=(OPS_LEGEND,))
