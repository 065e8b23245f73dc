"""Combined-layout report: the Python twin of ``tpcalc layout``.

It builds the calculators' layout and run from the request (``Layout.parallel``,
``Workload.run``) and prices them with ``tpcalc.calc.layout.report.layout_report``; a published
example with the same model and sizes contributes its cited MFU and a note on its workload.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpcalc.choices import TimeModel
from tpcalc.reports.request import Layout, Workload
from tpcalc.terms import Report

if TYPE_CHECKING:
    from tpcalc.calc.time.step import TimeOptions


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
    from tpcalc.calc.layout.report import layout_report as price_layout
    from tpcalc.calc.time.step import TimeOptions

    spec, hw = workload.spec, workload.hw
    parallel = layout.parallel(workload.node(layout))
    run = workload.run(layout, with_latency=with_latency)
    options = time_options if time_options is not None else TimeOptions()
    if ops:
        from tpcalc.calc.layout.groups import check_layout
        from tpcalc.calc.time.ops_table import ops_report
        from tpcalc.calc.time.step import step_time

        check_layout(spec, parallel, run, allow_uneven=allow_uneven)
        return ops_report(spec.name, step_time(spec, hw, parallel, run, options))
    example = matching_example(spec.name, parallel, hw.name)
    report = price_layout(
        spec, hw, parallel, run, cited=example.cited if example else None,
        allow_uneven=allow_uneven, time_model=time_model, time_options=options,
    )  # fmt: skip
    if workload.warnings:  # the defaulted sequence length
        report = report.model_copy(update={"warnings": (*workload.warnings, *report.warnings)})
    if example is None:
        return report
    note = (
        f"published layout {example.name}: seq {example.seq}, {example.microbatches} "
        f"micro-batches per step ({example.source})"
    )
    return report.model_copy(update={"notes": (*report.notes, note)})
