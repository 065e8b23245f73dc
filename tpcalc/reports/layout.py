"""Combined-layout report: the Python twin of ``tpcalc layout``.

It loads the configs, builds the layout and the run, and prices them with
``tpcalc.calc.layout_report.layout_report``; a published example with the same model and sizes
contributes its cited MFU and a note on its workload.
"""

from __future__ import annotations

from tpcalc.calc.activations import ActivationModel, Recompute
from tpcalc.calc.pipeline import Schedule
from tpcalc.calc.states import StateRecipe
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
) -> Report:
    """Load the configs, build the layout and the run, price them; a published example with the
    same model and sizes contributes its cited MFU and a note on its workload."""
    from tpcalc.calc.layout import LayoutRun, ParallelLayout
    from tpcalc.calc.layout_examples import matching_example
    from tpcalc.calc.layout_report import layout_report as price_layout
    from tpcalc.calc.zero import zero_stage
    from tpcalc.catalog import load_hardware, load_model
    from tpcalc.reports.inputs import node_size, positive, seq_warnings

    spec, hw = load_model(model), load_hardware(hardware)
    layout = ParallelLayout(
        tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, zero=zero_stage(zero), world_size=world_size,
        gpus_per_node=node_size(gpus_per_node, hw.gpus_per_node.value),
    )  # fmt: skip
    run = LayoutRun(
        seq=positive(seq, "--seq") if seq is not None else spec.seq_length,
        microbatches=microbatches, micro_batch=positive(micro_batch, "--micro-batch"), vpp=vpp,
        schedule=schedule, recipe=recipe, sp=sp, recompute=recompute, dtype=dtype,
        with_latency=with_latency, activations=activations,
    )  # fmt: skip
    example = matching_example(spec.name, layout, hw.name)
    report = price_layout(
        spec, hw, layout, run, cited=example.cited if example else None,
        allow_uneven=allow_uneven,
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
