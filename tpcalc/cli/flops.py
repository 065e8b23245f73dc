"""tpcalc flops: per-rank FLOPs of one micro-batch and its compute time."""

from __future__ import annotations

from typing import Annotated

import typer

from tpcalc.choices import AttentionFlops, ParamConvention, TimeModel
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
from tpcalc.cli.request import workload_of
from tpcalc.cli.time_options import AttentionFlopsOpt, TimeModelOpt
from tpcalc.render import Format
from tpcalc.units import ByteUnits

app = typer.Typer()


@app.command()
def flops(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MODEL,
    tp: TpOpt = None,
    seq: SeqOpt = None,
    micro_batch: MicroBatchOpt = 1,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    params: ParamsOpt = ParamConvention.matmul,
    attention_scores: Annotated[
        bool,
        typer.Option(
            "--attention-scores/--no-attention-scores",
            help="Add the attention-score FLOPs 12·b·s²·h·L (Narayanan et al. 2021 Eq. 3), "
            "counted as --attention-flops says.",
        ),
    ] = False,
    attention_flops: AttentionFlopsOpt = AttentionFlops.causal,
    mtp: Annotated[
        bool | None,
        typer.Option(
            "--mtp/--no-mtp",
            help="Count the MTP module's FLOPs (default: as --params does: 'all' yes, 'matmul' "
            "no). MoE models always count active parameters. Example: -m deepseek-v3 --mtp",
        ),
    ] = None,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
    time_model: TimeModelOpt = TimeModel.roofline,
) -> None:
    """Per-rank FLOPs of one micro-batch (6·N·tokens/t) and compute time at the achieved FLOP/s.

    Examples:

    \b
      tpcalc flops -m llama3-70b -s 8192 -t 8 --params all

    \b
      tpcalc flops -m qwen3.8 -s 4096 -t 8 --attention-scores --explain

    \b
      tpcalc flops -m deepseek-v3 -s 4096 --attention-scores \\
        --attention-flops full --mtp

    MoE models count the parameters a token multiplies (k of E routed experts), and the N
    row says so.
    """

    def build():
        from tpcalc.reports.tp import flops_report

        return flops_report(
            workload_of(ctx.params),
            tp,
            params=params,
            attention=attention_scores,
            attention_flops=attention_flops,
            mtp=mtp,
            time_model=time_model,
        )

    emit(build, fmt, units=units, explain=explain)
