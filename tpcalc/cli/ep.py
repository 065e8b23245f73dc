"""tpcalc ep: expert parallelism — experts per rank, all-to-all bytes and links, expert memory.

``ep_report`` is the command's Python twin (it loads the configs, then calls
``tpcalc.calc.ep.ep_row`` once per ep value).
"""

from __future__ import annotations

from typing import Annotated

import typer

from tpcalc.calc.ep_routing import EpRouting
from tpcalc.calc.states import StateRecipe
from tpcalc.cli.common import emit
from tpcalc.cli.cp import node_size
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
from tpcalc.cli.parallel_options import GpusPerNodeOpt, StateRecipeOpt, TpIntOpt
from tpcalc.render import Format
from tpcalc.terms import Report
from tpcalc.units import ByteUnits, Dtype

app = typer.Typer()

DEFAULT_MOE_MODEL = "deepseek-v3"  # the default model of the other commands has no experts
DEFAULT_EP = "8,64"  # inside one 8-GPU node, and seed 000's DeepSeek-V3 EP 64

EpListOpt = Annotated[
    str | None,
    typer.Option("--ep", help=f"Expert-parallel size: one value or a list (default {DEFAULT_EP})."),
]
CpIntOpt = Annotated[
    int, typer.Option("--cp", help="Context-parallel size (each rank dispatches s/cp tokens).")
]
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


def ep_report(
    model: str,
    hardware: str,
    *,
    ep: str | int | list[int] | None = None,
    tp: int = 1,
    cp: int = 1,
    seq: int | None = None,
    micro_batch: int = 1,
    routing: EpRouting | None = None,
    dtype: Dtype = Dtype.bf16,
    combine_dtype: Dtype | None = None,
    recipe: StateRecipe = StateRecipe.zero16,
    gpus_per_node: int | None = None,
    with_latency: bool = True,
) -> Report:
    """One row per ep: experts and expert memory per rank, the four all-to-alls of an MoE layer
    with their IB and NVLink shares, and all-to-all time against expert compute."""
    from tpcalc.calc.ep import ep_row
    from tpcalc.errors import divide
    from tpcalc.reports.dp_zero_pp import int_list
    from tpcalc.reports.inputs import positive, resolve

    inputs = resolve(model, hardware, seq=seq, micro_batch=micro_batch, tp=tp)
    g = node_size(gpus_per_node, inputs.hw.gpus_per_node.value)
    shard = positive(cp, "--cp") * tp
    tokens = divide(inputs.seq * inputs.micro_batch, shard, what="seq·micro_batch", by="cp·tp")
    rows = []
    for e in int_list(ep, "--ep", [int(v) for v in DEFAULT_EP.split(",")]):
        row = ep_row(
            inputs.spec, inputs.hw, ep=e, tokens=tokens, stride=tp, gpus_per_node=g,
            routing=routing, dispatch_dtype=dtype, combine_dtype=combine_dtype or dtype,
            recipe=recipe, with_latency=with_latency,
        )  # fmt: skip
        echo = {"model": row.inputs["model"], "hardware": inputs.hw.name, "seq": inputs.seq,
                "micro_batch": inputs.micro_batch, "tp": tp, "cp": cp, **row.inputs}  # fmt: skip
        rows.append(row.model_copy(update={"inputs": echo}))
    return Report(
        title=f"Expert parallelism per rank, one micro-batch fwd+bwd: {inputs.spec.name}",
        rows=tuple(rows),
        notes=(
            "tokens = s·b/(cp·tp) per rank; experts uniform; an all-to-all's IB and NVLink "
            "parts run at once (time = the slower); expert states before ZeRO",
        ),
    )


@app.command()
def ep(
    model: ModelOpt = DEFAULT_MOE_MODEL,
    ep: EpListOpt = None,
    tp: TpIntOpt = 1,
    cp: CpIntOpt = 1,
    seq: SeqOpt = None,
    micro_batch: MicroBatchOpt = 1,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    routing: RoutingOpt = None,
    dtype: DtypeOpt = Dtype.bf16,
    combine_dtype: CombineDtypeOpt = None,
    recipe: StateRecipeOpt = StateRecipe.zero16,
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

      tpcalc ep -m deepseek-v3 --ep 64 --hardware h800

      tpcalc ep --ep 8,64 --routing uniform --explain

      tpcalc ep --ep 64 --dtype fp8 --combine-dtype bf16 -f json
    """

    def build() -> Report:
        return ep_report(
            model, hardware, ep=ep, tp=tp, cp=cp, seq=seq, micro_batch=micro_batch,
            routing=routing, dtype=dtype, combine_dtype=combine_dtype, recipe=recipe,
            gpus_per_node=gpus_per_node, with_latency=latency,
        )  # fmt: skip

    emit(build, fmt, units=units, explain=explain)
