"""tpcalc comm: tensor-parallel communication per all-reduce, layer and step, and link times."""

from __future__ import annotations

import typer

from tpcalc.choices import ParamConvention, Recompute, TimeModel
from tpcalc.cli.common import emit
from tpcalc.cli.options import (
    DEFAULT_HARDWARE,
    DEFAULT_MODEL,
    DtypeOpt,
    ExplainOpt,
    FormatOpt,
    HardwareOpt,
    LatencyOpt,
    MicroBatchOpt,
    ModelOpt,
    ParamsOpt,
    RecomputeOpt,
    SeqOpt,
    SpOpt,
    TpOpt,
    UnitsOpt,
)
from tpcalc.cli.request import workload_of
from tpcalc.cli.time_options import TimeModelOpt
from tpcalc.render import Format
from tpcalc.units import ByteUnits, Dtype

app = typer.Typer()


@app.command()
def comm(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MODEL,
    tp: TpOpt = None,
    seq: SeqOpt = None,
    micro_batch: MicroBatchOpt = 1,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    sp: SpOpt = True,
    recompute: RecomputeOpt = Recompute.selective,
    dtype: DtypeOpt = Dtype.bf16,
    params: ParamsOpt = ParamConvention.matmul,
    latency: LatencyOpt = True,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
    time_model: TimeModelOpt = TimeModel.roofline,
) -> None:
    """TP communication of one micro-batch (fwd + bwd): bytes per all-reduce, per layer, per
    step, and the time on NVLink and on the inter-node link, as a share of compute.

    Examples:

    \b
      tpcalc comm --model llama3-70b -t 8

    \b
      tpcalc comm -m qwen3.8 -s 4096 -t 1,2,4,8 --hardware h800 \\
        --format json

    \b
      # seed 003's table 7-7, its conventions
      tpcalc comm -m llama3-70b -t 8 --params all --no-latency --no-sp \\
        --time-model fixed --explain
    """

    def build():
        from tpcalc.reports.tp import comm_report

        work = workload_of(ctx.params)
        return comm_report(work, tp, params=params, with_latency=latency, time_model=time_model)

    emit(build, fmt, units=units, explain=explain)
