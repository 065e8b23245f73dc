"""tpcalc dp: data-parallel gradient all-reduce per rank, link time, buckets, overlap."""

from __future__ import annotations

import typer

from tpcalc.choices import DDP_BUCKET_MIB, LinkChoice, ParamConvention, StateRecipe, TimeModel
from tpcalc.cli.common import emit
from tpcalc.cli.options import (
    DEFAULT_HARDWARE,
    DEFAULT_MODEL,
    ExplainOpt,
    FormatOpt,
    HardwareOpt,
    LatencyOpt,
    MicroBatchOpt,
    ModelOpt,
    ParamsOpt,
    SeqOpt,
    UnitsOpt,
)
from tpcalc.cli.parallel_options import (
    BucketMibOpt,
    DpListOpt,
    GpusPerNodeOpt,
    LinkOpt,
    MicrobatchesOpt,
    StateRecipeOpt,
    TpIntOpt,
)
from tpcalc.cli.request import layout_of, workload_of
from tpcalc.cli.time_options import TimeModelOpt
from tpcalc.render import Format
from tpcalc.units import ByteUnits

app = typer.Typer()


@app.command()
def dp(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MODEL,
    dp: DpListOpt = None,
    tp: TpIntOpt = 1,
    seq: SeqOpt = None,
    micro_batch: MicroBatchOpt = 1,
    microbatches: MicrobatchesOpt = 1,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    gpus_per_node: GpusPerNodeOpt = None,
    link: LinkOpt = LinkChoice.auto,
    state_recipe: StateRecipeOpt = StateRecipe.zero16,
    bucket_mib: BucketMibOpt = DDP_BUCKET_MIB,
    params: ParamsOpt = ParamConvention.matmul,
    latency: LatencyOpt = True,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
    time_model: TimeModelOpt = TimeModel.roofline,
) -> None:
    """Data parallelism: gradient bytes, ring all-reduce vs a naive gather to rank 0, time on
    the link the DP group crosses, DDP buckets, and whether it hides behind the backward pass.

    Examples:

    \b
      tpcalc dp -m qwen3.8 --hardware h800 -s 4096 --dp 8,64 --link ib \\
        --no-latency

    \b
      tpcalc dp -m llama3-70b --tp 8 --dp 16 --state-recipe megatron18 \\
        --format json
    """

    def build():
        from tpcalc.reports.dp_zero_pp import dp_report

        work, base = workload_of(ctx.params), layout_of(ctx.params, sweep=("dp",))
        return dp_report(
            work, base, dp, bucket_mib=bucket_mib, params=params, link=link,
            with_latency=latency, time_model=time_model,
        )  # fmt: skip

    emit(build, fmt, units=units, explain=explain)
