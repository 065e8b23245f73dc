"""tpcalc memory: activation memory (with/without SP, recompute modes) and model states per rank."""

from __future__ import annotations

from typing import Annotated

import typer

from tpcalc.calc.activations import ActivationModel, FullRecomputeSharding, Recompute
from tpcalc.calc.activations_exact.options import AttentionKernel, SoftmaxDtype
from tpcalc.calc.states import StateRecipe
from tpcalc.cli.common import emit
from tpcalc.cli.options import (
    DEFAULT_HARDWARE,
    DEFAULT_MODEL,
    ExplainOpt,
    FormatOpt,
    HardwareOpt,
    MicroBatchOpt,
    ModelOpt,
    RecomputeOpt,
    SeqOpt,
    SpOpt,
    TpOpt,
    UnitsOpt,
)
from tpcalc.render import Format
from tpcalc.units import ByteUnits

app = typer.Typer()


@app.command()
def memory(
    model: ModelOpt = DEFAULT_MODEL,
    tp: TpOpt = None,
    seq: SeqOpt = None,
    micro_batch: MicroBatchOpt = 1,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    sp: SpOpt = True,
    recompute: RecomputeOpt = Recompute.selective,
    full_sharding: Annotated[
        FullRecomputeSharding,
        typer.Option(
            "--full-recompute-sharding",
            help="Full recompute keeps 2sbh per layer: 'paper' (Table 2, not /t) or 'sp' (/t).",
        ),
    ] = FullRecomputeSharding.paper,
    state_recipe: Annotated[
        StateRecipe,
        typer.Option(
            "--state-recipe",
            help="Model states: zero16 (2+2+12 B/param) or megatron18 (fp32 grads, 18 B/param).",
        ),
    ] = StateRecipe.zero16,
    activations: Annotated[
        ActivationModel,
        typer.Option(
            "--activations",
            help="Which activation count enters the total: 'exact' (the tensors autograd saves "
            "for this architecture) or 'paper' (Korthikanti Table 2, the seeds' formula). "
            "Both are shown, with their difference.",
        ),
    ] = ActivationModel.exact,
    attention: Annotated[
        AttentionKernel,
        typer.Option("--attention", help="Attention kernel of the exact model."),
    ] = AttentionKernel.flash,
    softmax_dtype: Annotated[
        SoftmaxDtype,
        typer.Option("--softmax-dtype", help="Softmax output dtype (eager attention only)."),
    ] = SoftmaxDtype.bf16,
    dropout: Annotated[
        bool | None,
        typer.Option(
            "--dropout/--no-dropout",
            help="Dropout masks. Default: the model's (on for GPT-style, off for Llama-style).",
        ),
    ] = None,
    fused_norm: Annotated[
        bool, typer.Option("--fused-norm/--no-fused-norm", help="TE fused LayerNorm/RMSNorm.")
    ] = True,
    fused_swiglu: Annotated[
        bool,
        typer.Option("--fused-swiglu/--no-fused-swiglu", help="Megatron's fused SwiGLU kernel."),
    ] = True,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
) -> None:
    """Per-rank memory: activations, logits, model states and what is left on the card.

    Activations: by default the exact per-tensor count of what autograd saves for this
    architecture (--activations exact); --activations paper uses Korthikanti et al. 2022,
    Table 2 (the seeds' formula). Both are shown, with their difference. Negative free memory
    means the card is short by that much.

    Examples:

      tpcalc memory --seq 4096

      tpcalc memory -m qwen3.8 -s 4096 -t 1,8 --recompute selective --format json

      tpcalc memory -m llama3-70b -t 8 --no-sp --recompute none --explain
    """

    def build():
        from tpcalc.calc.activations_exact import ActivationOptions
        from tpcalc.reports.memory import memory_report

        options = ActivationOptions(
            attention=attention,
            softmax_dtype=softmax_dtype,
            dropout=dropout,
            fused_norm=fused_norm,
            fused_swiglu=fused_swiglu,
        )
        return memory_report(
            model,
            hardware,
            tp=tp,
            seq=seq,
            micro_batch=micro_batch,
            sp=sp,
            recompute=recompute,
            full_sharding=full_sharding,
            recipe=state_recipe,
            activations=activations,
            exact_options=options,
            explain_tensors=explain,
        )

    emit(build, fmt, units=units, explain=explain)
