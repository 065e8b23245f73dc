"""Shared CLI options: the same names everywhere (design.md, "CLI contract").

Each is an ``Annotated`` type (typer docs_src style) so commands declare them in one line.
Values are parsed here; their meaning is checked in the core, which raises ``TpcalcError``.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from tpcalc.choices import ParamConvention, Recompute
from tpcalc.render import Format
from tpcalc.units import ByteUnits, Dtype

DEFAULT_MODEL = "qwen3.8"
DEFAULT_HARDWARE = "h100-sxm"


class BytesMoved(str, Enum):
    """What "bytes" means: per-rank ring send bytes, or the message size."""

    ring = "ring"
    message = "message"


ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="Built-in model name ('tpcalc models'), a YAML in tpcalc's schema, a HF "
        "config.json, or a HF model directory holding one.",
    ),
]
TpOpt = Annotated[
    str | None,
    typer.Option(
        "--tp",
        "-t",
        help="Tensor-parallel size: one value or a list '1,2,4,8' (one row each). "
        "Default: powers of two up to the GPUs per node.",
    ),
]
SeqOpt = Annotated[
    int | None,
    typer.Option(
        "--seq",
        "-s",
        help="Sequence length in tokens. Default: the model's training length (for a HF "
        "config.json, the family's pre-training length or 4096, noted on stderr).",
    ),
]
MicroBatchOpt = Annotated[
    int, typer.Option("--micro-batch", "-b", help="Micro-batch size (sequences).")
]
HardwareOpt = Annotated[
    str,
    typer.Option("--hardware", help="Built-in accelerator ('tpcalc hardware') or a YAML path."),
]
SpOpt = Annotated[
    bool,
    typer.Option(
        "--sp/--no-sp", help="Sequence parallelism (Korthikanti et al. 2022) on top of TP."
    ),
]
RecomputeOpt = Annotated[
    Recompute,
    typer.Option("--recompute", help="Activation recomputation (Korthikanti et al. 2022 §5)."),
]
DtypeOpt = Annotated[Dtype, typer.Option("--dtype", help="Activation/communication dtype.")]
UnitsOpt = Annotated[
    ByteUnits,
    typer.Option("--units", help="Display bytes in GB (1e9, as the seeds) or GiB (2^30)."),
]
FormatOpt = Annotated[
    Format,
    typer.Option("--format", "-f", help="table for people; json/csv carry raw base units."),
]
ExplainOpt = Annotated[
    bool,
    typer.Option("--explain", help="Print each result's formula, source and substituted numbers."),
]
ParamsOpt = Annotated[
    ParamConvention,
    typer.Option(
        "--params",
        help="N in 6·N·tokens: 'matmul' (all but input embedding, vision tower, MTP; seed 000, "
        "the lesson 「一层的矩阵乘,能不能拆到几张卡上一起算?」) or 'all' (seed 003, "
        "llm_internals §7.3 「模型并行与张量并行」).",
    ),
]
BytesOpt = Annotated[
    BytesMoved,
    typer.Option(
        "--bytes",
        help="'ring': bytes each rank sends in a ring collective (2(t-1)/t·M per all-reduce); "
        "'message': the message size M.",
    ),
]
LatencyOpt = Annotated[
    bool,
    typer.Option(
        "--latency/--no-latency",
        help=(
            "Add ring latency to link times, as NCCL models it: α_intra per ring step inside a "
            "node, α_inter per step that crosses nodes (the seeds price bandwidth only)."
        ),
    ),
]
