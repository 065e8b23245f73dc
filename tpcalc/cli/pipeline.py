"""tpcalc pipeline: layers per stage, stage-to-stage bytes, bubble and in-flight activations."""

from __future__ import annotations

import typer

from tpcalc.choices import ActivationModel, AttentionKernel, LinkChoice, Recompute, Schedule
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
    RecomputeOpt,
    SeqOpt,
    SpOpt,
    UnitsOpt,
)
from tpcalc.cli.parallel_options import (
    ActivationsOpt,
    AttentionOpt,
    DpOpt,
    DropoutOpt,
    Fp8CacheOpt,
    Fp8LinearInputsOpt,
    GpusPerNodeOpt,
    LinkOpt,
    MicrobatchesOpt,
    PpListOpt,
    ProbsInActOpt,
    RecomputeModulesOpt,
    ScatterGatherOpt,
    ScheduleOpt,
    TpIntOpt,
    UnevenOpt,
    VppOpt,
)
from tpcalc.cli.picture_options import SaveSvgOpt, TimelineOpt
from tpcalc.cli.pictures import draw
from tpcalc.cli.request import layout_of, workload_of
from tpcalc.cli.time_options import (
    AccountEmbeddingOpt,
    AccountLossOpt,
    FirstStageLayersOpt,
    LastStageLayersOpt,
    PipelineLayoutOpt,
)
from tpcalc.render import Format
from tpcalc.units import ByteUnits, Dtype

app = typer.Typer()


@app.command()
def pipeline(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MODEL,
    pp: PpListOpt = None,
    microbatches: MicrobatchesOpt = 32,
    vpp: VppOpt = 1,
    schedule: ScheduleOpt = Schedule.one_f_one_b,
    tp: TpIntOpt = 1,
    dp: DpOpt = 1,
    seq: SeqOpt = None,
    micro_batch: MicroBatchOpt = 1,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    dtype: DtypeOpt = Dtype.bf16,
    sp: SpOpt = True,
    recompute: RecomputeOpt = Recompute.selective,
    activations: ActivationsOpt = ActivationModel.exact,
    uneven: UnevenOpt = True,
    scatter_gather: ScatterGatherOpt = True,
    gpus_per_node: GpusPerNodeOpt = None,
    link: LinkOpt = LinkChoice.auto,
    latency: LatencyOpt = True,
    recompute_modules: RecomputeModulesOpt = None,
    fp8_cache: Fp8CacheOpt = False,
    dropout: DropoutOpt = None,
    attention: AttentionOpt = AttentionKernel.flash,
    fp8_linear_inputs: Fp8LinearInputsOpt = None,
    moe_probs_in_act: ProbsInActOpt = True,
    first_stage_layers: FirstStageLayersOpt = None,
    last_stage_layers: LastStageLayersOpt = None,
    pipeline_layout: PipelineLayoutOpt = None,
    account_for_embedding: AccountEmbeddingOpt = False,
    account_for_loss: AccountLossOpt = False,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
    timeline: TimelineOpt = False,
    save_svg: SaveSvgOpt = None,
) -> None:
    """Pipeline parallelism: layers and parameters per stage, bytes between stages, the bubble
    of the schedule (1f1b, interleaved, zb-h1, dualpipe, gpipe), micro-batches in flight and the
    activations of the most loaded stage.

    Examples:

    \b
      tpcalc pipeline -m qwen3.8 -s 4096 --pp 8 --microbatches 32

    \b
      tpcalc pipeline --pp 8 --schedule interleaved --vpp 4 --explain

    \b
      tpcalc pipeline -m llama3-70b -t 8 --sp --pp 4 --activations paper

    \b
      tpcalc pipeline -m deepseek-v3 --pp 16 --microbatches 32 \\
        --schedule dualpipe -f json

    \b
      tpcalc pipeline --pp 4 --microbatches 8 --schedule zb-h1 --timeline \\
        --save-svg pp.svg

    Stages set by hand, read against each pp (the Llama 3 paper's split, §3.3.2: one layer
    fewer on the first and the last stage):

    \b
      tpcalc pipeline -m llama3-405b -t 8 --pp 16 --microbatches 16 \\
        --account-for-embedding-in-pipeline-split \\
        --account-for-loss-in-pipeline-split

    \b
      tpcalc pipeline -m llama3-70b --pp 4,8 --first-stage-layers 8 \\
        --last-stage-layers 8
    """

    def build():
        from tpcalc.reports.dp_zero_pp import pipeline_report
        from tpcalc.reports.request import StageSplit

        work, base = workload_of(ctx.params), layout_of(ctx.params, sweep=("pp",))
        split = StageSplit(
            first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
            pipeline_layout=pipeline_layout, embedding_in_split=account_for_embedding,
            loss_in_split=account_for_loss,
        )  # fmt: skip
        return pipeline_report(
            work, base, pp, allow_uneven=uneven, scatter_gather=scatter_gather, link=link,
            with_latency=latency, split=split,
        )  # fmt: skip

    report = emit(build, fmt, units=units, explain=explain)

    def pictures(width: int):
        from tpcalc.pictures.show import pipeline_pictures

        return pipeline_pictures(report, width)

    draw(pictures, fmt, asked=timeline, svg_path=save_svg, title="tpcalc pipeline")
