"""tpcalc memory: activation memory (with/without SP, recompute modes) and model states per rank."""

from __future__ import annotations

from typing import Annotated

import typer

from tpcalc.choices import (
    ActivationModel,
    AttentionKernel,
    FullRecomputeSharding,
    Recompute,
    RouterDtype,
    SoftmaxDtype,
    StateRecipe,
)
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
from tpcalc.cli.parallel_options import (
    ActivationsOpt,
    AttentionOpt,
    CapacityFactorOpt,
    DropoutOpt,
    Fp8CacheOpt,
    Fp8LinearInputsOpt,
    ProbsInActOpt,
    RecomputeModulesOpt,
    RouterDtypeOpt,
    StateRecipeOpt,
)
from tpcalc.cli.picture_options import BarsOpt, SaveSvgOpt
from tpcalc.cli.pictures import draw
from tpcalc.cli.request import workload_of
from tpcalc.render import Format
from tpcalc.units import ByteUnits

app = typer.Typer()


@app.command()
def memory(
    ctx: typer.Context,
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
    state_recipe: StateRecipeOpt = StateRecipe.zero16,
    activations: ActivationsOpt = ActivationModel.exact,
    attention: AttentionOpt = AttentionKernel.flash,
    softmax_dtype: Annotated[
        SoftmaxDtype,
        typer.Option("--softmax-dtype", help="Softmax output dtype (eager attention only)."),
    ] = SoftmaxDtype.bf16,
    dropout: DropoutOpt = None,
    fused_norm: Annotated[
        bool, typer.Option("--fused-norm/--no-fused-norm", help="TE fused LayerNorm/RMSNorm.")
    ] = True,
    fused_swiglu: Annotated[
        bool,
        typer.Option("--fused-swiglu/--no-fused-swiglu", help="Megatron's fused SwiGLU kernel."),
    ] = True,
    recompute_modules: RecomputeModulesOpt = None,
    fp8_cache: Fp8CacheOpt = False,
    fp8_linear_inputs: Fp8LinearInputsOpt = None,
    moe_probs_in_act: ProbsInActOpt = True,
    router_dtype: RouterDtypeOpt = RouterDtype.fp32,
    capacity_factor: CapacityFactorOpt = None,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
    bars: BarsOpt = False,
    save_svg: SaveSvgOpt = None,
) -> None:
    """Per-rank memory: activations, logits, model states and what is left on the card.

    Activations: by default the exact per-tensor count of what autograd saves for this
    architecture (--activations exact); --activations paper uses Korthikanti et al. 2022,
    Table 2 (the seeds' formula). Both are shown, with their difference. Negative free memory
    means the card is short by that much.

    Examples:

    \b
      tpcalc memory --seq 4096

    \b
      tpcalc memory -m qwen3.8 -s 4096 -t 1,8 --recompute selective \\
        --format json

    \b
      tpcalc memory -m llama3-70b -t 8 --no-sp --recompute none --explain

    \b
      tpcalc memory -m qwen3.8 -t 1,2,4,8 --bars --save-svg memory.svg

    \b
      tpcalc memory -m deepseek-v3 -t 1 --recompute none \\
        --recompute-modules layernorm,mla_up_proj,moe_act --fp8-cache \\
        --moe-probs-in-act --state-recipe bf16-moments
    """

    def build():
        from tpcalc.calc.activations.exact.options import ActivationOptions
        from tpcalc.reports.memory import memory_report

        work = workload_of(ctx.params)
        kernels = ActivationOptions(
            attention=attention, softmax_dtype=softmax_dtype, dropout=dropout,
            fused_norm=fused_norm, fused_swiglu=fused_swiglu,
        )  # fmt: skip
        return memory_report(
            work, tp, full_sharding=full_sharding, kernels=kernels, explain_tensors=explain
        )

    report = emit(build, fmt, units=units, explain=explain)

    def pictures(width: int):
        from tpcalc.pictures.show import memory_pictures

        return memory_pictures(report, units, width)

    draw(pictures, fmt, asked=bars, svg_path=save_svg, title="tpcalc memory")
