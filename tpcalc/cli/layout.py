"""tpcalc layout: a whole [TP, CP, PP, DP] (+ EP, ZeRO) layout — checks, placement, memory,
communication per dimension, bubble, step time and MFU.

The command's Python twin is ``tpcalc.reports.layout.layout_report``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from tpcalc.calc.activations.exact.options import RouterDtype
from tpcalc.calc.activations.paper import ActivationModel, Recompute
from tpcalc.calc.ep.all_to_all import MoeDispatcher
from tpcalc.calc.layout.groups import MemoryTechniques
from tpcalc.calc.params.states import StateRecipe
from tpcalc.calc.pipeline.schedule import Schedule
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
    CapacityFactorOpt,
    DispatcherOpt,
    DpOpt,
    EtpOpt,
    Fp8CacheOpt,
    GpusPerNodeOpt,
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
)
from tpcalc.cli.parallel_options import recompute_modules as recompute_modules_list
from tpcalc.render import Format
from tpcalc.units import ByteUnits, Dtype

app = typer.Typer()

CpOpt = Annotated[int, typer.Option("--cp", help="Context-parallel size.")]
EpOpt = Annotated[
    int, typer.Option("--ep", help="Expert-parallel size (taken from the dp·cp ranks).")
]
ZeroStageOpt = Annotated[int, typer.Option("--zero", help="ZeRO stage 0|1|2|3 over the DP ranks.")]
WorldSizeOpt = Annotated[
    int | None,
    typer.Option("--world-size", help="GPUs in the job; must equal tp·cp·pp·dp (default: that)."),
]


@app.command()
def layout(
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
    recipe: StateRecipeOpt = StateRecipe.zero16,
    sp: SpOpt = True,
    recompute: RecomputeOpt = Recompute.selective,
    activations: ActivationsOpt = ActivationModel.exact,
    dtype: DtypeOpt = Dtype.bf16,
    recompute_modules: RecomputeModulesOpt = None,
    fp8_cache: Fp8CacheOpt = False,
    moe_probs_in_act: ProbsInActOpt = False,
    mtp: MtpOpt = True,
    offload_layers: OffloadLayersOpt = 0,
    moe_dispatcher: DispatcherOpt = MoeDispatcher.alltoall,
    capacity_factor: CapacityFactorOpt = None,
    router_dtype: RouterDtypeOpt = RouterDtype.fp32,
    uneven: UnevenOpt = True,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    latency: LatencyOpt = True,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
) -> None:
    """A combined layout: checks world size and every divisibility, places groups on GPUs (TP
    innermost, PP outermost; a group wider than a node is priced on the inter-node link), and
    reports per-rank memory against the card, bytes and time per dimension with its link, the
    bubble, an estimated step time and MFU (with a source's measured MFU when it cites one).

    Examples:

      tpcalc layout -m llama3-405b --tp 8 --cp 1 --pp 16 --dp 128 --zero 1 --microbatches 16

      tpcalc layout -m deepseek-v3 --hardware h800 --pp 16 --dp 128 --ep 64 --zero 1
      --schedule dualpipe

      tpcalc layout -m llama3-70b --tp 16 --dp 4 --explain

    Memory techniques, each explicit (DeepSeek-V3 as published, report §3.2-3.3):

      tpcalc layout -m deepseek-v3 --hardware h800 --pp 16 --dp 128 --ep 64 --zero 1
      --schedule dualpipe --recompute none --recompute-modules layernorm,mla_up_proj,moe_act
      --fp8-cache --moe-probs-in-act --state-recipe bf16-moments

    Every published layout at once: tpcalc validate --memory
    """

    def build():
        from tpcalc.reports.layout import layout_report

        return layout_report(
            model, hardware, tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, zero=zero,
            world_size=world_size, gpus_per_node=gpus_per_node, seq=seq,
            micro_batch=micro_batch, microbatches=microbatches, vpp=vpp, schedule=schedule,
            recipe=recipe, sp=sp, recompute=recompute, activations=activations, dtype=dtype,
            allow_uneven=uneven,
            with_latency=latency, etp=etp,
            memory=MemoryTechniques(
                recompute_modules=recompute_modules_list(recompute_modules), fp8_cache=fp8_cache,
                moe_probs_in_act=moe_probs_in_act, mtp=mtp, offload_layers=offload_layers,
                moe_dispatcher=moe_dispatcher.value, capacity_factor=capacity_factor,
                router_dtype=router_dtype.value,
            ),
        )  # fmt: skip

    emit(build, fmt, units=units, explain=explain)
