"""Combined-layout report: the Python twin of ``tpcalc layout``.

It loads the configs, builds the layout and the run, and prices them with
``tpcalc.calc.layout.report.layout_report``; a published example with the same model and sizes
contributes its cited MFU and a note on its workload.
"""

from __future__ import annotations

from tpcalc.calc.layout.groups import MemoryTechniques
from tpcalc.calc.time.ops_table import ops_report
from tpcalc.calc.time.step import Overlap, TimeOptions
from tpcalc.choices import (
    ActivationModel,
    AttentionFlops,
    Recompute,
    Schedule,
    StateRecipe,
    TimeModel,
)
from tpcalc.terms import Report
from tpcalc.units import Dtype


def layout_report(
    model: str,
    hardware: str,
    *,
    tp: int = 1,
    cp: int = 1,
    pp: int = 1,
    dp: int = 1,
    ep: int = 1,
    zero: int = 0,
    world_size: int | None = None,
    gpus_per_node: int | None = None,
    seq: int | None = None,
    micro_batch: int = 1,
    microbatches: int = 32,
    vpp: int = 1,
    schedule: Schedule = Schedule.one_f_one_b,
    recipe: StateRecipe = StateRecipe.zero16,
    sp: bool = True,
    recompute: Recompute = Recompute.selective,
    activations: ActivationModel = ActivationModel.exact,
    dtype: Dtype = Dtype.bf16,
    allow_uneven: bool = True,
    with_latency: bool = True,
    time_model: TimeModel = TimeModel.roofline,
    tp_comm_overlap: bool = False,
    dp_overlap: bool = True,
    ep_overlap: bool | None = None,
    cp_overlap: bool = True,
    first_stage_layers: int | None = None,
    last_stage_layers: int | None = None,
    recompute_layers: int | None = None,
    ops: bool = False,
    etp: int = 1,
    memory: MemoryTechniques | None = None,
    attention_flops: AttentionFlops = AttentionFlops.causal,
    fused_sinks: bool = True,
) -> Report:
    """Load the configs, build the layout and the run, price them; a published example with the
    same model and sizes contributes its cited MFU and a note on its workload. ``ops`` returns
    the slowest stage's operations instead (``tpcalc layout --ops``)."""
    from tpcalc.calc.dp.zero import zero_stage
    from tpcalc.calc.layout.examples import matching_example
    from tpcalc.calc.layout.groups import LayoutRun, MemoryTechniques, ParallelLayout
    from tpcalc.calc.layout.report import layout_report as price_layout
    from tpcalc.catalog import load_hardware, load_model
    from tpcalc.reports.inputs import node_size, positive, seq_warnings

    spec, hw = load_model(model), load_hardware(hardware)
    layout = ParallelLayout(
        tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp, zero=zero_stage(zero), world_size=world_size,
        gpus_per_node=node_size(gpus_per_node, hw.gpus_per_node.value),
    )  # fmt: skip
    run = LayoutRun(
        seq=positive(seq, "--seq") if seq is not None else spec.seq_length,
        microbatches=microbatches, micro_batch=positive(micro_batch, "--micro-batch"), vpp=vpp,
        schedule=schedule, recipe=recipe, sp=sp, recompute=recompute, dtype=dtype,
        with_latency=with_latency, activations=activations, memory=memory or MemoryTechniques(),
    )  # fmt: skip
    options = TimeOptions(
        overlap=Overlap(
            tp_comm=tp_comm_overlap, dp_grad_reduce=dp_overlap, dp_param_gather=dp_overlap,
            ep_a2a=ep_overlap,
            cp_ring=cp_overlap,
        ),
        first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
        recompute_layers=recompute_layers,
        causal_model_flops=attention_flops is AttentionFlops.causal, fused_sinks=fused_sinks,
    )  # fmt: skip
    if ops:
        from tpcalc.calc.layout.groups import check_layout
        from tpcalc.calc.time.step import step_time

        check_layout(spec, layout, run, allow_uneven=allow_uneven)
        return ops_report(spec.name, step_time(spec, hw, layout, run, options))
    example = matching_example(spec.name, layout, hw.name)
    report = price_layout(
        spec, hw, layout, run, cited=example.cited if example else None,
        allow_uneven=allow_uneven, time_model=time_model, time_options=options,
    )  # fmt: skip
    if defaulted := seq_warnings(spec, seq):
        report = report.model_copy(update={"warnings": (*defaulted, *report.warnings)})
    if example is None:
        return report
    note = (
        f"published layout {example.name}: seq {example.seq}, {example.microbatches} "
        f"micro-batches per step ({example.source})"
    )
    return report.model_copy(update={"notes": (*report.notes, note)})
