"""A combined layout, priced: one row per dimension (tp, cp, pp, dp, ep) and a summary row.

The summary row holds the per-rank memory of the most loaded pipeline rank against the card,
the step time as compute + bubble + the exposed time of every dimension, and an MFU estimate
beside the measured MFU a source cites, when there is one. Every assumption is an input of the
rows (schedule, micro-batches, recompute, recipe, dtype, overlap per dimension, the achieved
FLOP/s of the hardware config).
"""

from __future__ import annotations

from dataclasses import dataclass

from tpcalc.calc.layout.comm import (
    DimCost,
    cp_cost,
    dimension_row,
    dp_cost,
    ep_cost,
    pp_cost,
    tp_cost,
)
from tpcalc.calc.layout.compute import (
    rank_flops,
    stage_times,
)
from tpcalc.calc.layout.groups import (
    LayoutRun,
    ParallelLayout,
    check_layout,
    expert_dp_group,
    place_groups,
    placement_warnings,
)
from tpcalc.calc.layout.memory import layout_memory, rank_layers, rank_memory
from tpcalc.calc.layout.memory_explain import layout_memory_terms
from tpcalc.calc.layout.summary import DIM_ORDER, fixed_step_summary
from tpcalc.calc.layout.summary_explain import fixed_summary_terms
from tpcalc.calc.layout.timed import (
    ROOFLINE_COMM,
    roofline_costs,
    roofline_summary,
    time_inputs,
    with_overlap,
)
from tpcalc.calc.pipeline.schedule import bubble_time_s
from tpcalc.calc.time.step import TimeOptions, step_time
from tpcalc.choices import TimeModel
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Report, Row, Scalar


@dataclass(frozen=True)
class Cited:
    """A measured figure a source reports for this layout (shown, never computed)."""

    mfu: float
    source: str


def _inputs(spec: ModelSpec, hw: HardwareSpec, lay: ParallelLayout, run: LayoutRun) -> dict:
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


def _layer_counts(spec: ModelSpec, lay: ParallelLayout, run: LayoutRun) -> tuple[int, int, int]:
    """(layers, full-attention layers, MoE layers) of the pipeline rank with the most of each."""
    ranks = rank_layers(spec.num_hidden_layers, lay.pp, run.vpp)
    types = spec.resolved_layer_types
    full = max(sum(1 for i in r if types[i] != "linear_attention") for r in ranks)
    moe = max(sum(1 for i in r if spec.is_moe_layer(i)) for r in ranks)
    return max(len(r) for r in ranks), full, moe


def layout_report(
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
    """Check, place and price ``layout`` for ``spec`` on ``hw`` (sources: the calc modules).

    ``time_model`` roofline (default) times the step per operation with the overlap rules of
    ``time_options``; fixed keeps the seeds' convention (compute at the achieved FLOP/s)."""
    check_layout(spec, layout, run, allow_uneven=allow_uneven)
    groups = place_groups(layout)
    mem = rank_memory(
        spec, layout, seq=run.seq, micro_batch=run.micro_batch, microbatches=run.microbatches,
        vpp=run.vpp, schedule=run.schedule, recipe=run.recipe, sp=run.sp, recompute=run.recompute,
        activations=run.activations, techniques=run.memory,
    )  # fmt: skip
    worst = max(mem, key=lambda m: m.total_bytes)
    flops = rank_flops(
        spec, layout, seq=run.seq, micro_batch=run.micro_batch, vpp=run.vpp,
        recompute=run.recompute,
    )  # fmt: skip
    slowest = max(flops, key=lambda f: f.total)
    achieved = hw.achieved_flop_per_s.value
    mb_s = slowest.total / achieved
    recompute_share = slowest.recompute_flop / slowest.total if slowest.total else 0.0
    layers, full, moe = _layer_counts(spec, layout, run)
    biggest = max(mem, key=lambda m: m.dense_params + m.expert_params)
    plain = stage_times(mb_s, 0.0, recompute_share)
    costs: dict[str, DimCost] = {
        "tp": tp_cost(spec, hw, layout, run, groups["tp"], layers),
        "cp": cp_cost(spec, hw, layout, run, groups["cp"], full),
        "pp": pp_cost(spec, hw, layout, run, groups["pp"]),
        "dp": dp_cost(
            hw, layout, run, (groups["dp"], expert_dp_group(layout)),
            (biggest.dense_params, biggest.expert_params),
            plain.backward_input_s + plain.backward_weight_s,
        ),
        "ep": ep_cost(spec, hw, layout, run, groups["ep"], moe, mb_s * run.microbatches),
    }  # fmt: skip
    inputs = _inputs(spec, hw, layout, run)
    if time_model is TimeModel.roofline:
        opts = time_options or TimeOptions()
        st = step_time(spec, hw, layout, run, opts)
        inputs = {**inputs, **time_inputs(hw, opts)}
        costs = with_overlap(roofline_costs(costs, st), opts)
        rows = [
            dimension_row(groups[d], costs[d], inputs, hw, run.with_latency, ROOFLINE_COMM)
            for d in DIM_ORDER
        ]
        summary = roofline_summary(st, costs, cited)
    else:
        inputs = {**inputs, "time_model": TimeModel.fixed.value}
        rows = [dimension_row(groups[d], costs[d], inputs, hw, run.with_latency) for d in DIM_ORDER]
        in_stage = sum(costs[d].exposed_s for d in ("tp", "cp", "ep")) / run.microbatches
        times = stage_times(mb_s, in_stage, recompute_share)
        bubble = bubble_time_s(run.schedule, layout.pp, run.microbatches, times, run.vpp)
        fixed = fixed_step_summary(spec, hw, layout, run, costs, mb_s, bubble, cited)
        summary = fixed_summary_terms(fixed, hw)
    summary += layout_memory_terms(layout_memory(worst, layout, hw), hw, run.activations)
    rows.append(Row(inputs={**inputs, "dimension": "total"}, terms=tuple(summary)))
    return Report(
        title=(
            f"{spec.name} on {layout.world} × {hw.name}: [TP, CP, PP, DP] = {layout.tp} × "
            f"{layout.cp} × {layout.pp} × {layout.dp}, EP {layout.ep}, ZeRO-{int(layout.zero)}"
        ),
        rows=tuple(rows),
        warnings=tuple(_warnings(groups, layout, worst.total_bytes, hw, costs)),
    )


def _warnings(
    groups: dict, lay: ParallelLayout, memory: float, hw: HardwareSpec, costs: dict[str, DimCost]
) -> list[str]:
    out = placement_warnings(groups, lay.gpus_per_node)
    card = hw.memory_bytes.value
    if memory > card:
        out.append(
            "the most loaded rank needs more than the card's memory (memory_over_card in the "
            "total row): raise tp, pp or the ZeRO stage, or recompute activations"
        )
    if costs["cp"].exposed_s > 0:
        out.append("the CP ring transfer is slower than the attention it should hide behind")
    return out


def row_inputs(report: Report) -> dict[str, Scalar]:
    """The inputs every row shares (the summary row's, without ``dimension``)."""
    return {k: v for k, v in report.rows[-1].inputs.items() if k != "dimension"}
