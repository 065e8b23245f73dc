"""tpcalc ep: expert parallelism — experts per rank, all-to-all bytes and links, expert memory.

The command's Python twin is ``tpcalc.reports.cp_ep.ep_report``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from tpcalc.choices import EpRouting, MoeDispatcher, StateRecipe
from tpcalc.cli.common import emit
from tpcalc.cli.options import (
    DEFAULT_HARDWARE,
    DtypeOpt,
    ExplainOpt,
    FormatOpt,
    HardwareOpt,
    LatencyOpt,
    MicroBatchOpt,
    ModelOpt,
    SeqOpt,
    UnitsOpt,
)
from tpcalc.cli.parallel_options import (
    CapacityFactorOpt,
    CpOpt,
    DispatcherOpt,
    EpListOpt,
    EtpOpt,
    GpusPerNodeOpt,
    StateRecipeOpt,
    TpIntOpt,
)
from tpcalc.cli.request import layout_of, workload_of
from tpcalc.render import Format
from tpcalc.units import ByteUnits, Dtype

app = typer.Typer()

DEFAULT_MOE_MODEL = "deepseek-v3"  # the default model of the other commands has no experts

RoutingOpt = Annotated[
    EpRouting | None,
    typer.Option(
        "--routing",
        help="How a token's k copies spread over nodes: 'node-limited' (DeepSeek-V3: at most "
        "topk_group nodes, one IB copy per node) or 'uniform'. Default: node-limited when the "
        "config sets topk_group.",
    ),
]
CombineDtypeOpt = Annotated[
    Dtype | None,
    typer.Option(
        "--combine-dtype",
        help="dtype of the combine all-to-all (default: --dtype; DeepSeek-V3 dispatches in fp8 "
        "and combines in bf16).",
    ),
]


@app.command()
def ep(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MOE_MODEL,
    ep: EpListOpt = None,
    tp: TpIntOpt = 1,
    etp: EtpOpt = 1,
    cp: CpOpt = 1,
    seq: SeqOpt = None,
    micro_batch: MicroBatchOpt = 1,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    routing: RoutingOpt = None,
    dtype: DtypeOpt = Dtype.bf16,
    combine_dtype: CombineDtypeOpt = None,
    state_recipe: StateRecipeOpt = StateRecipe.zero16,
    moe_dispatcher: DispatcherOpt = MoeDispatcher.alltoall,
    capacity_factor: CapacityFactorOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    latency: LatencyOpt = True,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
) -> None:
    """Expert parallelism: routed experts per rank, routed-expert parameters and memory per
    rank, dispatch and combine all-to-all bytes per MoE layer (forward and backward), the share
    of a token's copies that cross nodes under node-limited routing, and time vs expert compute.

    Examples:

    \b
      tpcalc ep -m deepseek-v3 --ep 64 --hardware h800

    \b
      tpcalc ep --ep 8,64 --routing uniform --explain

    \b
      tpcalc ep --ep 64 --dtype fp8 --combine-dtype bf16 -f json

    \b
      tpcalc ep --ep 8 -t 2 --etp 1 --moe-dispatcher allgather \\
        --capacity-factor 1.25
    """

    def build():
        from tpcalc.reports.cp_ep import ep_report

        work, base = workload_of(ctx.params), layout_of(ctx.params, sweep=("ep",))
        return ep_report(
            work, base, ep, routing=routing, combine_dtype=combine_dtype, with_latency=latency
        )

    emit(build, fmt, units=units, explain=explain)
