"""tpcalc cp: context parallelism — ring K/V traffic, overlap, causal balance, Ulysses limit.

``cp_report`` is the command's Python twin (it loads the configs, then calls
``tpcalc.calc.cp.cp_row`` once per cp value).
"""

from __future__ import annotations

from typing import Annotated

import typer

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
from tpcalc.cli.parallel_options import GpusPerNodeOpt, LinkOpt, TpIntOpt
from tpcalc.render import Format
from tpcalc.reports.dp_zero_pp import LinkChoice
from tpcalc.terms import Report
from tpcalc.units import ByteUnits, Dtype

app = typer.Typer()

CpListOpt = Annotated[
    str | None,
    typer.Option("--cp", help="Context-parallel size: one value or a list '2,4,8' (one row each)."),
]
ChunksOpt = Annotated[
    int | None,
    typer.Option(
        "--chunks",
        help="Sequence chunks for the causal-balance count (default 2·cp; zig-zag needs a "
        "multiple of 2·cp). Seed 000 uses 16 chunks on 4 cards.",
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
DEFAULT_CP = "2,4,8"


def node_size(gpus_per_node: int | None, hardware_default: int) -> int:
    """--gpus-per-node, validated, or the hardware config's value."""
    from tpcalc.reports.inputs import positive

    return hardware_default if gpus_per_node is None else positive(gpus_per_node, "--gpus-per-node")


def cp_report(
    model: str,
    hardware: str,
    *,
    cp: str | int | list[int] | None = None,
    tp: int = 1,
    seq: int | None = None,
    micro_batch: int = 1,
    dtype: Dtype = Dtype.bf16,
    grad_dtype: Dtype | None = None,
    chunks: int | None = None,
    gpus_per_node: int | None = None,
    link: LinkChoice = LinkChoice.auto,
    with_latency: bool = True,
) -> Report:
    """One row per cp: ring K/V bytes per layer and micro-batch, link time vs attention compute,
    causal work contiguous vs zig-zag, and whether Ulysses could split the heads instead."""
    from tpcalc.calc.cp import cp_row
    from tpcalc.reports.dp_zero_pp import int_list, pick_link
    from tpcalc.reports.inputs import positive, resolve

    inputs = resolve(model, hardware, seq=seq, micro_batch=micro_batch, tp=tp)
    g = node_size(gpus_per_node, inputs.hw.gpus_per_node.value)
    chunks = positive(chunks, "--chunks") if chunks is not None else None
    rows, warnings = [], []
    for c in int_list(cp, "--cp", [int(v) for v in DEFAULT_CP.split(",")]):
        row = cp_row(
            inputs.spec, inputs.hw, seq=inputs.seq, cp=c, micro_batch=inputs.micro_batch,
            tp=positive(tp, "--tp"), dtype=dtype, grad_dtype=grad_dtype, chunks=chunks,
            link=pick_link(link, c, tp, g), with_latency=with_latency,
        )  # fmt: skip
        echo = {**row.inputs, "hardware": inputs.hw.name, "gpus_per_node": g}
        rows.append(row.model_copy(update={"inputs": echo}))
        if float(row.value("kv_over_compute_ratio")) > 1:
            warnings.append(
                f"cp={c}: a K,V block takes longer to send than its attention takes to compute; "
                "the ring cannot hide it (use longer sequences per rank or a faster link)"
            )
    return Report(
        title=f"Context parallelism (ring attention) per rank, one micro-batch: {inputs.spec.name}",
        rows=tuple(rows),
        warnings=tuple(warnings),
        notes=(
            f"ring layers = full-attention layers only ({inputs.spec.full_attention_layers} of "
            f"{inputs.spec.num_hidden_layers}); causal work counts block pairs",
        ),
    )


@app.command()
def cp(
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

      tpcalc cp -m qwen3.8 -s 131072 --cp 8 --hardware h800

      tpcalc cp -s 131072 --cp 4 --chunks 16 --explain

      tpcalc cp -m llama3-405b -s 131072 --tp 8 --cp 16 -f json
    """

    def build() -> Report:
        return cp_report(
            model, hardware, cp=cp, tp=tp, seq=seq, micro_batch=micro_batch, dtype=dtype,
            grad_dtype=grad_dtype, chunks=chunks, gpus_per_node=gpus_per_node, link=link,
            with_latency=latency,
        )  # fmt: skip

    emit(build, fmt, units=units, explain=explain)
