"""tpcalc flops: per-rank FLOPs of one micro-batch and its compute time."""

from __future__ import annotations

from typing import Annotated

import typer

from tpcalc.calc.params.counts import ParamConvention
from tpcalc.cli.common import emit
from tpcalc.cli.options import (
    DEFAULT_HARDWARE,
    DEFAULT_MODEL,
    ExplainOpt,
    FormatOpt,
    HardwareOpt,
    MicroBatchOpt,
    ModelOpt,
    ParamsOpt,
    SeqOpt,
    TpOpt,
    UnitsOpt,
)
from tpcalc.render import Format
from tpcalc.units import ByteUnits

app = typer.Typer()


@app.command()
def flops(
    model: ModelOpt = DEFAULT_MODEL,
    tp: TpOpt = None,
    seq: SeqOpt = None,
    micro_batch: MicroBatchOpt = 1,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    params: ParamsOpt = ParamConvention.matmul,
    attention: Annotated[
        bool,
        typer.Option(
            "--attention/--no-attention",
            help="Add the attention-score FLOPs 12·b·s²·h·L (Narayanan et al. 2021 Eq. 3).",
        ),
    ] = False,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
) -> None:
    """Per-rank FLOPs of one micro-batch (6·N·tokens/t) and compute time at the achieved FLOP/s.

    Examples:

      tpcalc flops -m llama3-70b -s 8192 -t 8 --params all

      tpcalc flops -m qwen3.8 -s 4096 -t 8 --attention --explain
    """

    def build():
        from tpcalc.reports.tp import flops_report

        return flops_report(
            model,
            hardware,
            tp=tp,
            seq=seq,
            micro_batch=micro_batch,
            params=params,
            attention=attention,
        )

    emit(build, fmt, units=units, explain=explain)
