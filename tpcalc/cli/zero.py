"""tpcalc zero: model states per rank for ZeRO stages 0-3, room for activations, comm per rank."""

from __future__ import annotations

import typer

from tpcalc.choices import ActivationModel, AttentionKernel, LinkChoice, Recompute, StateRecipe
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
    RecomputeOpt,
    SeqOpt,
    SpOpt,
    UnitsOpt,
)
from tpcalc.cli.parallel_options import (
    ActivationsOpt,
    AttentionOpt,
    DpListOpt,
    DropoutOpt,
    Fp8CacheOpt,
    Fp8LinearInputsOpt,
    GpusPerNodeOpt,
    LinkOpt,
    MicrobatchesOpt,
    ProbsInActOpt,
    RecomputeModulesOpt,
    StateRecipeOpt,
    TpIntOpt,
    ZeroOpt,
)
from tpcalc.cli.request import layout_of, workload_of
from tpcalc.render import Format
from tpcalc.units import ByteUnits

app = typer.Typer()


@app.command()
def zero(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MODEL,
    dp: DpListOpt = None,
    zero: ZeroOpt = None,
    tp: TpIntOpt = 1,
    seq: SeqOpt = None,
    micro_batch: MicroBatchOpt = 1,
    microbatches: MicrobatchesOpt = 1,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    state_recipe: StateRecipeOpt = StateRecipe.zero16,
    sp: SpOpt = True,
    recompute: RecomputeOpt = Recompute.selective,
    gpus_per_node: GpusPerNodeOpt = None,
    link: LinkOpt = LinkChoice.auto,
    latency: LatencyOpt = True,
    activations: ActivationsOpt = ActivationModel.exact,
    recompute_modules: RecomputeModulesOpt = None,
    fp8_cache: Fp8CacheOpt = False,
    dropout: DropoutOpt = None,
    attention: AttentionOpt = AttentionKernel.flash,
    fp8_linear_inputs: Fp8LinearInputsOpt = None,
    moe_probs_in_act: ProbsInActOpt = True,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
) -> None:
    """ZeRO stages 0-3: model states per rank, memory left for activations (and whether the
    activations fit), and the bytes each rank sends per step (ZeRO-3 = 1.5x DP with one
    micro-batch; ZeRO-2 reduce-scatters and ZeRO-3 also gathers for each of --microbatches).

    Examples:

    \b
      tpcalc zero -m qwen3.8 --hardware h800 -s 4096 --dp 8

    \b
      tpcalc zero -m llama3-70b --tp 8 --dp 1 --zero 0

    \b
      tpcalc zero --dp 8,64 --zero 3 --state-recipe megatron18 --format csv

    \b
      tpcalc zero -m llama3-8b --dp 64 --zero 3 --microbatches 4
    """

    def build():
        from tpcalc.reports.dp_zero_pp import zero_report

        work, base = workload_of(ctx.params), layout_of(ctx.params, sweep=("dp", "zero"))
        return zero_report(work, base, dp, zero, link=link, with_latency=latency)

    emit(build, fmt, units=units, explain=explain)
