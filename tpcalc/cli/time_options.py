"""Options of the step-time model (``tpcalc layout``), one ``Annotated`` type each."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tpcalc.choices import AttentionFlops, MoeDispatcher, Recompute, TimeModel
from tpcalc.errors import InputError

if TYPE_CHECKING:
    from tpcalc.calc.time.step import TimeOptions

TimeModelOpt = Annotated[
    TimeModel,
    typer.Option(
        "--time-model",
        help="'roofline': every operation timed on the card's measured kernel rates, "
        "collectives by NCCL bus bandwidth, with the overlaps below; 'fixed': the seeds' "
        "convention (compute at the card's achieved FLOP/s, TP and EP exposed).",
    ),
]
TpCommOverlapOpt = Annotated[
    bool,
    typer.Option(
        "--tp-comm-overlap/--no-tp-comm-overlap",
        help="Overlap TP collectives with their GEMMs (Transformer Engine userbuffers, "
        "Megatron --tp-comm-overlap; off by default as in Megatron-LM).",
    ),
]
DpOverlapOpt = Annotated[
    bool,
    typer.Option(
        "--dp-overlap/--no-dp-overlap",
        help="Bucketed gradient reduce-scatter under the backward and parameter all-gather "
        "under the forward (Megatron --overlap-grad-reduce --overlap-param-gather; on in "
        "NVIDIA's performance recipes).",
    ),
]
EpOverlapOpt = Annotated[
    bool | None,
    typer.Option(
        "--ep-overlap/--no-ep-overlap",
        help="Hide the EP all-to-all under expert compute (Megatron moe_a2a_overlap). "
        "Megatron-Core refuses it with full or block recompute, the moe recompute module, "
        "pp > 1 without --vpp, the allgather dispatcher or more than one MTP layer. "
        "Default: on with --schedule dualpipe (DeepSeek-V3 §3.2.1), else off.",
    ),
]
CpOverlapOpt = Annotated[
    bool,
    typer.Option(
        "--cp-overlap/--no-cp-overlap",
        help="Run the CP ring's K,V transfers under the attention blocks (Ring Attention).",
    ),
]
PpOverlapOpt = Annotated[
    bool,
    typer.Option(
        "--pp-overlap/--no-pp-overlap",
        help="Run stage-to-stage sends beside compute: only those the schedule waits for are "
        "exposed (the fill and drain, and 1F1B's steady state, where each pass waits on a "
        "neighbour's); --no-pp-overlap waits on every send, as Megatron without "
        "overlap_p2p_comm (and Megatron-LM of 2021-2022) does.",
    ),
]
PpScatterGatherOpt = Annotated[
    bool,
    typer.Option(
        "--pp-scatter-gather/--no-pp-scatter-gather",
        help="Without SP, each TP rank sends 1/t of a stage's activation over its own link and "
        "the next stage all-gathers it over the TP group (Megatron-LM "
        "--scatter-gather-tensors-in-pipeline, Narayanan et al. 2021 §4.1). Off by default: "
        "Megatron-Core sends the s/t slice with SP.",
    ),
]
FirstStageLayersOpt = Annotated[
    int | None,
    typer.Option(
        "--first-stage-layers",
        min=1,
        help="Decoder layers on the first pipeline stage (it also holds the embedding); the "
        "rest split evenly (Megatron --decoder-first-pipeline-num-layers).",
    ),
]
LastStageLayersOpt = Annotated[
    int | None,
    typer.Option(
        "--last-stage-layers",
        min=1,
        help="Decoder layers on the last stage (it also holds the LM head and the loss) "
        "(Megatron --decoder-last-pipeline-num-layers).",
    ),
]
RecomputeLayersOpt = Annotated[
    int | None,
    typer.Option(
        "--recompute-layers",
        min=1,
        help="Fully recompute the first N layers of every model chunk, the others keeping "
        "their activations (Megatron --recompute-granularity full --recompute-method block "
        "--recompute-num-layers N); with --recompute none or selective (the other layers'), "
        "e.g. --recompute none --recompute-layers 5.",
    ),
]
OpsOpt = Annotated[
    bool,
    typer.Option(
        "--ops",
        help="Instead of the layout table, list every operation of the slowest stage for one "
        "micro-batch: shape, FLOP, bytes, compute- or memory-bound, efficiency, time.",
    ),
]
AttentionFlopsOpt = Annotated[
    AttentionFlops,
    typer.Option(
        "--attention-flops",
        help="How MFU counts the attention scores: 'causal' s²/2 (Megatron-LM, the default) or "
        "'full' s² (the seeds, Narayanan et al. 2021 Eq. 3). The kernels' work is causal "
        "either way.",
    ),
]
FusedSinksOpt = Annotated[
    bool,
    typer.Option(
        "--fused-sinks/--unfused-sinks",
        help="Attention sinks (GPT-OSS) in a fused kernel, or the unfused fallback with the "
        "scores materialised that Transformer Engine takes without one (TE issue #2318).",
    ),
]
PipelineLayoutOpt = Annotated[
    str | None,
    typer.Option(
        "--pipeline-layout",
        help="Megatron-Core --pipeline-model-parallel-layout: the layers of each of the pp·vpp "
        "virtual stages, '|' ending a stage, t a decoder layer, E the embedding (first stage), "
        "m an MTP module and L the loss (last stage), x*n and (...)*n repeats. Default: an even "
        "split. Example: --pp 16 --pipeline-layout 'Et*4|(t*4|)*14tmL'",
    ),
]

AccountEmbeddingOpt = Annotated[
    bool,
    typer.Option(
        "--account-for-embedding-in-pipeline-split",
        help="Count the embedding as one layer of the pipeline split (Megatron-Core's option of "
        "the same name): layers + 1 (+ 1 with the loss) slots split evenly over the pp·vpp "
        "virtual stages, the first building one decoder layer fewer. Example: Llama 3.1 405B "
        "(126 layers) on --pp 16 --vpp 8 with both options: 128 slots, one per stage.",
    ),
]
AccountLossOpt = Annotated[
    bool,
    typer.Option(
        "--account-for-loss-in-pipeline-split",
        help="Count the LM head and loss as one layer of the pipeline split (Megatron-Core's "
        "option of the same name): the last virtual stage builds one decoder layer fewer.",
    ),
]


def time_options_of(params: Mapping[str, Any]) -> TimeOptions:
    """The step model's options from a command's parsed options (``ctx.params``), as
    ``request.workload_of`` builds the workload: the overlaps, the stage split (first/last
    stage layers, a pipeline layout string read against pp · vpp, or the embedding and loss
    counted as layers), the MFU convention."""
    from tpcalc.calc.time.pipeline_layout import parse_pipeline_layout
    from tpcalc.calc.time.step import Overlap, TimeOptions

    block = params["recompute_layers"]
    if block is not None and params.get("recompute") is Recompute.full:
        raise InputError(
            f"--recompute-layers {block}: block recompute of {block} layers per model chunk "
            "keeps the other layers' activations, but --recompute full recomputes every layer; "
            f"use --recompute none --recompute-layers {block} (Megatron's full granularity, "
            "block method), or drop --recompute-layers"
        )
    text = params.get("pipeline_layout")
    chunks = parse_pipeline_layout(text, params["pp"] * params["vpp"]) if text else None
    dp = params["dp_overlap"]
    return TimeOptions(
        overlap=Overlap(
            tp_comm=params["tp_comm_overlap"], dp_grad_reduce=dp, dp_param_gather=dp,
            ep_a2a=params["ep_overlap"], cp_ring=params["cp_overlap"],
            pp_p2p=params.get("pp_overlap", True),
        ),
        pp_scatter_gather=params.get("pp_scatter_gather", False),
        first_stage_layers=params["first_stage_layers"],
        last_stage_layers=params["last_stage_layers"],
        recompute_layers=params["recompute_layers"],
        causal_model_flops=params["attention_flops"] is AttentionFlops.causal,
        fused_sinks=params["fused_sinks"],
        ep_node_dedup=params["moe_dispatcher"] is MoeDispatcher.flex,
        chunk_layers=chunks,
        embedding_in_split=params.get("account_for_embedding", False),
        loss_in_split=params.get("account_for_loss", False),
    )  # fmt: skip
