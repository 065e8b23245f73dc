"""tpcalc check: tensor-parallel divisibility, KV replication, vocab padding and shard shapes."""

from __future__ import annotations

from typing import Annotated

import typer

from tpcalc.choices import DEFAULT_VOCAB_PAD_MULTIPLE
from tpcalc.cli.common import emit
from tpcalc.cli.options import (
    DEFAULT_MODEL,
    ExplainOpt,
    FormatOpt,
    ModelOpt,
    TpOpt,
    UnitsOpt,
)
from tpcalc.cli.request import workload_of
from tpcalc.render import Format
from tpcalc.units import ByteUnits

app = typer.Typer()

VocabPadOpt = Annotated[
    int,
    typer.Option(
        "--vocab-pad-multiple",
        help="Pad the vocab to a multiple of this × t (Megatron --make-vocab-size-divisible-by); "
        "1 = no padding beyond what t needs.",
    ),
]
ShardsOpt = Annotated[
    bool,
    typer.Option("--shards", help="Print the per-card shard shape of every weight instead."),
]


@app.command()
def check(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MODEL,
    tp: TpOpt = None,
    vocab_pad_multiple: VocabPadOpt = DEFAULT_VOCAB_PAD_MULTIPLE,
    shards: ShardsOpt = False,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
) -> None:
    """Which t a model admits: query/KV heads, FFN and expert widths, linear-attention heads
    and padded vocab rows per rank, KV replication (warned on stderr) and parameters per rank.
    Without --tp: every valid t up to 8.

    Examples:

    \b
      tpcalc check --model llama3-70b -t 8 --shards --vocab-pad-multiple 1

    \b
      tpcalc check -m qwen3.8 -t 1,2,4,8 --format json

    \b
      tpcalc check -m deepseek-v3 -t 8 --explain
    """

    def build():
        from tpcalc.reports.tp import check_report

        work = workload_of(ctx.params)  # check reads only the model (the card is never priced)
        return check_report(work, tp, vocab_pad_multiple=vocab_pad_multiple, shards=shards)

    emit(build, fmt, units=units, explain=explain)
