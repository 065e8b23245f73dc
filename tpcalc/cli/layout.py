"""tpcalc layout: a whole [TP, CP, PP, DP] (+ EP, ZeRO) layout — checks, placement, memory,
communication per dimension, bubble, step time and MFU.

The command's Python twin is ``tpcalc.reports.layout.layout_report``.
"""

from __future__ import annotations

import typer

from tpcalc.choices import (
    ActivationModel,
    AttentionFlops,
    AttentionKernel,
    LossKernel,
    MoeDispatcher,
    Recompute,
    RouterDtype,
    Schedule,
    StateRecipe,
    TimeModel,
)
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
    CapacityFactorOpt,
    CpOpt,
    DispatcherOpt,
    DpOpt,
    DropoutOpt,
    EpOpt,
    EtpOpt,
    Fp8CacheOpt,
    Fp8LinearInputsOpt,
    GpusPerNodeOpt,
    LossKernelOpt,
    MicrobatchesOpt,
    MtpOpt,
    OffloadLayersOpt,
    PpOpt,
    ProbsInActOpt,
    RecomputeModulesOpt,
    RouterDtypeOpt,
    ScheduleOpt,
    StateRecipeOpt,
    TpIntOpt,
    UnevenOpt,
    VppOpt,
    WorldSizeOpt,
    ZeroStageOpt,
)
from tpcalc.cli.picture_options import BarsOpt, MapOpt, SaveSvgOpt, TimelineOpt
from tpcalc.cli.pictures import draw
from tpcalc.cli.request import layout_of, workload_of
from tpcalc.cli.time_options import (
    AccountEmbeddingOpt,
    AccountLossOpt,
    AttentionFlopsOpt,
    CpOverlapOpt,
    DpOverlapOpt,
    EpOverlapOpt,
    FirstStageLayersOpt,
    FusedSinksOpt,
    LastStageLayersOpt,
    OpsOpt,
    PipelineLayoutOpt,
    PpOverlapOpt,
    PpScatterGatherOpt,
    RecomputeLayersOpt,
    TimeModelOpt,
    TpCommOverlapOpt,
    time_options_of,
)
from tpcalc.render import Format
from tpcalc.units import ByteUnits, Dtype

app = typer.Typer()


@app.command()
def layout(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MODEL,
    tp: TpIntOpt = 1,
    cp: CpOpt = 1,
    pp: PpOpt = 1,
    dp: DpOpt = 1,
    ep: EpOpt = 1,
    etp: EtpOpt = 1,
    zero: ZeroStageOpt = 0,
    world_size: WorldSizeOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    seq: SeqOpt = None,
    micro_batch: MicroBatchOpt = 1,
    microbatches: MicrobatchesOpt = 32,
    vpp: VppOpt = 1,
    schedule: ScheduleOpt = Schedule.one_f_one_b,
    state_recipe: StateRecipeOpt = StateRecipe.zero16,
    sp: SpOpt = True,
    recompute: RecomputeOpt = Recompute.selective,
    activations: ActivationsOpt = ActivationModel.exact,
    dtype: DtypeOpt = Dtype.bf16,
    recompute_modules: RecomputeModulesOpt = None,
    fp8_cache: Fp8CacheOpt = False,
    dropout: DropoutOpt = None,
    attention: AttentionOpt = AttentionKernel.flash,
    fp8_linear_inputs: Fp8LinearInputsOpt = None,
    moe_probs_in_act: ProbsInActOpt = True,
    mtp: MtpOpt = True,
    offload_layers: OffloadLayersOpt = 0,
    moe_dispatcher: DispatcherOpt = MoeDispatcher.alltoall,
    loss_kernel: LossKernelOpt = LossKernel.fp32_copy,
    capacity_factor: CapacityFactorOpt = None,
    router_dtype: RouterDtypeOpt = RouterDtype.fp32,
    uneven: UnevenOpt = True,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    latency: LatencyOpt = True,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
    bars: BarsOpt = False,
    timeline: TimelineOpt = False,
    group_map: MapOpt = False,
    save_svg: SaveSvgOpt = None,
    time_model: TimeModelOpt = TimeModel.roofline,
    tp_comm_overlap: TpCommOverlapOpt = False,
    dp_overlap: DpOverlapOpt = True,
    ep_overlap: EpOverlapOpt = None,
    cp_overlap: CpOverlapOpt = True,
    pp_overlap: PpOverlapOpt = True,
    pp_scatter_gather: PpScatterGatherOpt = False,
    first_stage_layers: FirstStageLayersOpt = None,
    last_stage_layers: LastStageLayersOpt = None,
    recompute_layers: RecomputeLayersOpt = None,
    ops: OpsOpt = False,
    attention_flops: AttentionFlopsOpt = AttentionFlops.causal,
    fused_sinks: FusedSinksOpt = True,
    pipeline_layout: PipelineLayoutOpt = None,
    account_for_embedding: AccountEmbeddingOpt = False,
    account_for_loss: AccountLossOpt = False,
) -> None:
    """A combined layout: checks world size and every divisibility, places groups on GPUs (TP
    innermost, PP outermost; a group wider than a node is priced on the inter-node link), and
    reports per-rank memory against the card, bytes and time per dimension with its link, the
    bubble, the step time and MFU (with a source's measured MFU when it cites one).

    The step time is a per-operation model by default (--time-model roofline): every GEMM,
    attention core and memory-bound kernel of each stage timed on the card's measured kernel
    rates, collectives on NCCL bus bandwidth, the overlaps below, the pipeline schedule, the DP
    tail and the optimizer; its parts add up to the step. 'tpcalc validate' checks it against
    published runs. --time-model fixed keeps the seed documents' 400 TFLOP/s convention.

    Examples:

    \b
      tpcalc layout -m llama3-405b --tp 8 --cp 1 --pp 16 --dp 128 --zero 1 \\
        --microbatches 16

    \b
      tpcalc layout -m deepseek-v3 --hardware h800 --pp 16 --dp 128 --ep 64 \\
        --zero 1 --schedule dualpipe

    \b
      tpcalc layout -m llama3-70b --tp 16 --dp 4 --explain

    \b
      tpcalc layout -m llama3-70b --tp 16 --dp 4 --map --bars --timeline \\
        --save-svg layout.svg

    \b
      tpcalc layout -m llama3-70b --tp 4 --pp 8 --vpp 5 --dp 2 --zero 1 \\
        --schedule interleaved --microbatches 64 --dtype fp8 \\
        --tp-comm-overlap --recompute none

    \b
      tpcalc layout -m llama3-405b --tp 8 --pp 16 --dp 128 --zero 1 \\
        --microbatches 16 --ops

    A published run's MoE dispatcher and stage split (Megatron-Bridge DeepSeek-V3 on 256 GB200):

    \b
      tpcalc layout -m deepseek-v3 --hardware gb200 --gpus-per-node 64 \\
        --pp 4 --vpp 4 --dp 64 --ep 64 --zero 1 --schedule interleaved \\
        --microbatches 64 --dtype fp8 --recompute none --moe-dispatcher flex \\
        --pipeline-layout 'Et*4|(t*4|)*14tmL'

    The embedding and the loss counted as layers of the split, as Megatron-Bridge's Llama 3.1
    405B recipe does (126 layers + 2 over PP16 x VP8, one per virtual stage):

    \b
      tpcalc layout -m llama3-405b --hardware gb200 --tp 4 --pp 16 --vpp 8 \\
        --dp 4 --zero 1 --schedule interleaved --microbatches 384 \\
        --dtype fp8 --recompute none \\
        --account-for-embedding-in-pipeline-split \\
        --account-for-loss-in-pipeline-split

    Memory techniques, each explicit (DeepSeek-V3 as published, report §3.2-3.3):

    \b
      tpcalc layout -m deepseek-v3 --hardware h800 --pp 16 --dp 128 --ep 64 \\
        --zero 1 --schedule dualpipe --recompute none \\
        --recompute-modules layernorm,mla_up_proj,moe_act --fp8-cache \\
        --moe-probs-in-act --state-recipe bf16-moments

    Megatron-LM's own 2021 run of its 1T GPT on 3,072 A100 (Narayanan et al. 2021 Table 1):
    its attention with the scores materialised, full recompute, fp16, no distributed optimizer,
    the gradient all-reduce after the backward (local DDP):

    \b
      tpcalc layout -m megatron-gpt-1t --hardware a100-80g --tp 8 --pp 64 \\
        --dp 6 --zero 0 --microbatches 512 --no-sp --recompute full \\
        --dtype fp16 --attention eager --no-dp-overlap

    Every published layout at once: tpcalc validate --memory
    """

    request = []  # the (Workload, Layout, TimeOptions) build made, which the pictures draw

    def build():
        from tpcalc.reports.layout import layout_report

        options = time_options_of(ctx.params)
        work, lay = workload_of(ctx.params), layout_of(ctx.params)
        request.append((work, lay, options))
        return layout_report(
            work, lay, allow_uneven=uneven, with_latency=latency, time_model=time_model,
            time_options=options, ops=ops,
        )  # fmt: skip

    report = emit(build, fmt, units=units, explain=explain)
    if ops:
        return
    anything = bars or timeline or group_map

    def pictures(width: int):
        from tpcalc.pictures.show import layout_pictures

        work, lay, options = request[0]
        return layout_pictures(
            report, work, lay, with_latency=latency, bars=bars or not anything,
            timeline=timeline or not anything, group_map=group_map or not anything,
            units=units, width=width, time_options=options,
        )  # fmt: skip

    draw(pictures, fmt, asked=anything, svg_path=save_svg, title="tpcalc layout")
