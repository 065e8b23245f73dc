"""tpcalc cp: context parallelism — ring K/V traffic, overlap, causal balance, Ulysses limit.

The command's Python twin is ``tpcalc.reports.cp_ep.cp_report``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from tpcalc.choices import LinkChoice
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
    SeqOpt,
    UnitsOpt,
)
from tpcalc.cli.parallel_options import CpListOpt, GpusPerNodeOpt, LinkOpt, TpIntOpt
from tpcalc.cli.request import layout_of, workload_of
from tpcalc.render import Format
from tpcalc.units import ByteUnits, Dtype

app = typer.Typer()

ChunksOpt = Annotated[
    int | None,
    typer.Option(
        "--chunks",
        help="Sequence chunks for the causal-balance count (default 2·cp; zig-zag needs a "
        "multiple of 2·cp). Seed 000 (the lesson 「一层的矩阵乘,能不能拆到几张卡上一起算?」) uses "
        "16 chunks on 4 cards.",
    ),
]
GradDtypeOpt = Annotated[
    Dtype | None,
    typer.Option(
        "--grad-dtype",
        help="dtype of the dK,dV sent back in the backward ring (default: --dtype; "
        "ring-flash-attention accumulates them in fp32).",
    ),
]


@app.command()
def cp(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MODEL,
    cp: CpListOpt = None,
    tp: TpIntOpt = 1,
    seq: SeqOpt = None,
    micro_batch: MicroBatchOpt = 1,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    dtype: DtypeOpt = Dtype.bf16,
    grad_dtype: GradDtypeOpt = None,
    chunks: ChunksOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    link: LinkOpt = LinkChoice.auto,
    latency: LatencyOpt = True,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
) -> None:
    """Context parallelism: the K,V block each rank passes per ring step, steps and bytes per
    full-attention layer (forward and backward), transfer vs attention time per step, causal
    work per rank contiguous vs zig-zag, and Ulysses' limit by KV heads.

    Examples:

    \b
      tpcalc cp -m qwen3.8 -s 131072 --cp 8 --hardware h800

    \b
      tpcalc cp -s 131072 --cp 4 --chunks 16 --explain

    \b
      tpcalc cp -m llama3-405b -s 131072 --tp 8 --cp 16 -f json
    """

    def build():
        from tpcalc.reports.cp_ep import cp_report

        work, base = workload_of(ctx.params), layout_of(ctx.params, sweep=("cp",))
        return cp_report(
            work, base, cp, grad_dtype=grad_dtype, chunks=chunks, link=link, with_latency=latency
        )

    emit(build, fmt, units=units, explain=explain)
