"""A combined layout, priced: every dimension's bytes and time, the step, and the memory of the
most loaded rank against the card, as one typed result (``LayoutPrice``).

The step is timed per operation by default (``calc.time.step``, with the overlap rules of
``TimeOptions``); ``TimeModel.fixed`` keeps the seeds' convention: m micro-batches of the slowest
stage at the achieved FLOP/s + the pipeline bubble + every dimension's exposed communication
(``calc.layout.summary``). ``tpcalc.reports.layout`` turns the result into the rows
``tpcalc layout`` prints.
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.calc.layout.comm import DimCosts, cp_cost, dp_cost, ep_cost, pp_cost, tp_cost
from tpcalc.calc.layout.compute import rank_flops, stage_times
from tpcalc.calc.layout.groups import (
    Group,
    LayoutRun,
    ParallelLayout,
    check_layout,
    expert_dp_group,
    place_groups,
    placement_warnings,
)
from tpcalc.calc.layout.memory import LayoutMemory, layout_memory, run_memory
from tpcalc.calc.layout.summary import Cited, FixedStepSummary, fixed_step_summary
from tpcalc.calc.layout.timed import (
    RooflineSummary,
    roofline_costs,
    roofline_summary,
    with_overlap,
)
from tpcalc.calc.pipeline.schedule import bubble_time_s, rank_layers
from tpcalc.calc.time.step import TimeOptions, hand_split, step_time
from tpcalc.calc.tp.blocks import tp_blocks
from tpcalc.choices import TimeModel
from tpcalc.specs import HardwareSpec, ModelSpec


class LayoutPrice(Struct, frozen=True):
    """One layout priced: its groups, each dimension's cost, the step summary of the time model
    (``summary``), the most loaded rank's memory against the card, and what to warn about."""

    spec: ModelSpec
    hw: HardwareSpec
    layout: ParallelLayout
    run: LayoutRun
    time_model: TimeModel
    time_options: TimeOptions | None  # the step model's options (under fixed: only the split)
    groups: dict[str, Group]
    costs: DimCosts
    summary: RooflineSummary | FixedStepSummary
    memory: LayoutMemory
    warnings: tuple[str, ...]


def _layer_counts(
    spec: ModelSpec, lay: ParallelLayout, run: LayoutRun, counts: tuple[int, ...] | None
) -> tuple[int, int, int, int, int]:
    """(layers, full-attention layers, linear-attention layers, MoE layers, TP blocks) of the
    pipeline rank with the most of each (``tp.blocks.tp_blocks``)."""
    ranks = rank_layers(spec.num_hidden_layers, lay.pp, run.vpp, counts)
    types = spec.resolved_layer_types
    full = max(sum(1 for i in r if types[i] != "linear_attention") for r in ranks)
    linear = max(sum(1 for i in r if types[i] == "linear_attention") for r in ranks)
    moe = max(sum(1 for i in r if spec.is_moe_layer(i)) for r in ranks)
    blocks = max(sum(tp_blocks(spec, spec.is_moe_layer(i)) for i in r) for r in ranks)
    return max(len(r) for r in ranks), full, linear, moe, blocks


def price_layout(
    spec: ModelSpec,
    hw: HardwareSpec,
    layout: ParallelLayout,
    run: LayoutRun,
    *,
    cited: Cited | None = None,
    allow_uneven: bool = True,
    time_model: TimeModel = TimeModel.roofline,
    time_options: TimeOptions | None = None,
) -> LayoutPrice:
    """Check, place and price ``layout`` for ``spec`` on ``hw`` (sources: the calc modules).

    ``time_model`` roofline (default) times the step per operation with the overlap rules of
    ``time_options``; fixed keeps the seeds' convention (compute at the achieved FLOP/s). A
    stage split set by hand in ``time_options`` (first/last stage layers, a pipeline layout, the
    embedding and loss counted as layers), under either model,
    places the layers, their parameters and their activations on the ranks."""
    counts = (
        hand_split(time_options, spec.num_hidden_layers, layout.pp, run.vpp)
        if time_options is not None
        else None
    )
    check_layout(spec, layout, run, allow_uneven=allow_uneven, by_hand=counts is not None)
    groups = place_groups(layout)
    block = time_options.recompute_layers if time_options is not None else None
    mem = run_memory(spec, layout, run, counts=counts, block_layers=block)
    worst = max(mem, key=lambda m: m.total_bytes)
    flops = rank_flops(
        spec, layout, seq=run.seq, micro_batch=run.micro_batch, vpp=run.vpp,
        recompute=run.recompute,
    )  # fmt: skip
    slowest = max(flops, key=lambda f: f.total)
    achieved = hw.achieved_flop_per_s.value
    mb_s = slowest.total / achieved
    recompute_share = slowest.recompute_flop / slowest.total if slowest.total else 0.0
    layers, full, linear, moe, blocks = _layer_counts(spec, layout, run, counts)
    biggest = max(mem, key=lambda m: m.dense_params + m.expert_params)
    plain = stage_times(mb_s, 0.0, recompute_share)
    costs = DimCosts(
        tp=tp_cost(spec, hw, layout, run, groups["tp"], layers, blocks),
        cp=cp_cost(spec, hw, layout, run, groups["cp"], full, linear),
        pp=pp_cost(spec, hw, layout, run, groups["pp"]),
        dp=dp_cost(
            hw, layout, run, (groups["dp"], expert_dp_group(layout)),
            (biggest.dense_params, biggest.expert_params),
            plain.backward_input_s + plain.backward_weight_s,
        ),
        ep=ep_cost(spec, hw, layout, run, groups["ep"], moe, mb_s * run.microbatches),
    )  # fmt: skip
    summary: RooflineSummary | FixedStepSummary
    opts = time_options  # the fixed model reads only its stage split (``counts`` above)
    if time_model is TimeModel.roofline:
        opts = time_options or TimeOptions()
        st = step_time(spec, hw, layout, run, opts)
        costs = with_overlap(roofline_costs(costs, st), opts)
        summary = roofline_summary(st, costs, cited)
    else:
        in_stage = sum(c.exposed_s for c in (costs.tp, costs.cp, costs.ep)) / run.microbatches
        times = stage_times(mb_s, in_stage, recompute_share)
        bubble = bubble_time_s(run.schedule, layout.pp, run.microbatches, times, run.vpp)
        summary = fixed_step_summary(spec, hw, layout, run, costs, mb_s, bubble, cited)
    return LayoutPrice(
        spec=spec, hw=hw, layout=layout, run=run, time_model=time_model, time_options=opts,
        groups=groups, costs=costs, summary=summary, memory=layout_memory(worst, layout, hw),
        warnings=tuple(_warnings(groups, layout, worst.total_bytes, hw, costs, spec, run)),
    )  # fmt: skip


def _warnings(
    groups: dict[str, Group], lay: ParallelLayout, memory: float, hw: HardwareSpec,
    costs: DimCosts, spec: ModelSpec, run: LayoutRun,
) -> list[str]:  # fmt: skip
    out = placement_warnings(groups, lay.gpus_per_node)
    card = hw.memory_bytes.value
    if memory > card:
        fixes = "raise tp, pp or the ZeRO stage, or recompute activations"
        if spec.is_moe and not run.memory.moe_probs_in_act:
            # the combine-side weighting keeps every expert output (activations.exact.mlp)
            fixes += (
                "; Megatron-Core 0.13+ keeps no expert output (its experts weight by the router "
                "probability in their activation): --moe-probs-in-act, the default"
            )
        out.append(
            "the most loaded rank needs more than the card's memory (memory_over_card in the "
            f"total row): {fixes}"
        )
    if costs.cp.exposed_s > 0:
        out.append("the CP ring transfer is slower than the attention it should hide behind")
    return out
