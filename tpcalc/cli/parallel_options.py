"""Options of the parallelism commands (dp, zero, pipeline; reusable by cp, ep, layout).

Same style as ``tpcalc.cli.options``: one ``Annotated`` type per option, choices as str Enums.
"""

from __future__ import annotations

from typing import Annotated

import typer

from tpcalc.calc.activations.paper import ActivationModel
from tpcalc.calc.params.states import StateRecipe
from tpcalc.calc.pipeline.schedule import Schedule
from tpcalc.reports.dp_zero_pp import LinkChoice

DpListOpt = Annotated[
    str | None,
    typer.Option("--dp", help="Data-parallel size: one value or a list '8,64' (one row each)."),
]
DpOpt = Annotated[int, typer.Option("--dp", help="Data-parallel size.")]
PpListOpt = Annotated[
    str | None,
    typer.Option(
        "--pp", help="Pipeline-parallel size: one value or a list '4,8,16' (one row each)."
    ),
]
PpOpt = Annotated[int, typer.Option("--pp", help="Pipeline-parallel size.")]
TpIntOpt = Annotated[
    int, typer.Option("--tp", "-t", help="Tensor-parallel size (one value; TP is innermost).")
]
ZeroOpt = Annotated[
    int | None,
    typer.Option("--zero", help="ZeRO stage 0|1|2|3. Default: one row per stage."),
]
MicrobatchesOpt = Annotated[
    int,
    typer.Option("--microbatches", help="Micro-batches per step (m; gradient-accumulation steps)."),
]
VppOpt = Annotated[
    int, typer.Option("--vpp", help="Model chunks per rank (v) for --schedule interleaved.")
]
ScheduleOpt = Annotated[
    Schedule,
    typer.Option("--schedule", help="Pipeline schedule (bubble and in-flight micro-batches)."),
]
GpusPerNodeOpt = Annotated[
    int | None,
    typer.Option("--gpus-per-node", help="GPUs per node (NVLink domain). Default: the hardware's."),
]
LinkOpt = Annotated[
    LinkChoice,
    typer.Option(
        "--link",
        help="Link the group is priced on: 'auto' places ranks (TP innermost) and takes the "
        "slowest link crossed; 'nvlink' or 'ib' force one.",
    ),
]
BucketMibOpt = Annotated[
    int, typer.Option("--bucket-mib", help="DDP gradient bucket in MiB (PyTorch default 25).")
]
StateRecipeOpt = Annotated[
    StateRecipe,
    typer.Option(
        "--state-recipe",
        help="Bytes/param of model states: zero16 = 2+2+12 with bf16 grads (ZeRO); "
        "megatron18 = 2+4+12 with fp32 grads (Megatron).",
    ),
]
UnevenOpt = Annotated[
    bool,
    typer.Option(
        "--uneven/--no-uneven",
        help="Allow stages with unequal layer counts (--no-uneven: pp must divide the layers).",
    ),
]
ScatterGatherOpt = Annotated[
    bool,
    typer.Option(
        "--scatter-gather/--no-scatter-gather",
        help="Send 1/t of each stage-to-stage activation per TP rank (Narayanan et al. 2021 §4.1).",
    ),
]
ActivationsOpt = Annotated[
    ActivationModel,
    typer.Option(
        "--activations",
        help="Activation count per layer: 'exact' (what autograd saves for this "
        "architecture, flash attention) or 'paper' (Korthikanti Table 2).",
    ),
]
