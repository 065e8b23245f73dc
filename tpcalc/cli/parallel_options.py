"""Options of the parallelism commands (dp, zero, pipeline; reusable by cp, ep, layout).

Same style as ``tpcalc.cli.options``: one ``Annotated`` type per option, choices as str Enums.
"""

from __future__ import annotations

from typing import Annotated

import typer

from tpcalc.choices import (
    DEFAULT_EP,
    ActivationModel,
    AttentionKernel,
    LinkChoice,
    LossKernel,
    MoeDispatcher,
    RouterDtype,
    Schedule,
    StateRecipe,
)
from tpcalc.cli.request import recompute_modules as recompute_modules  # beside workload_of

DpListOpt = Annotated[
    str | None,
    typer.Option("--dp", help="Data-parallel size: one value or a list '8,64' (one row each)."),
]
PpListOpt = Annotated[
    str | None,
    typer.Option(
        "--pp", help="Pipeline-parallel size: one value or a list '4,8,16' (one row each)."
    ),
]
CpListOpt = Annotated[
    str | None,
    typer.Option("--cp", help="Context-parallel size: one value or a list '2,4,8' (one row each)."),
]
EpListOpt = Annotated[
    str | None,
    typer.Option("--ep", help=f"Expert-parallel size: one value or a list (default {DEFAULT_EP})."),
]


def _one_size(value: str, what: str, sweeps: str) -> int:
    """A size as every command spells it ('8', or a list '8,64' where a command sweeps it), here
    one value: a command that prices one layout says so instead of failing to parse."""
    sizes = [part.strip() for part in str(value).split(",")]
    if len(sizes) != 1:
        raise typer.BadParameter(
            f"{value!r}: this command prices one {what} size, give one value such as 8 ({sweeps})"
        )
    try:
        return int(sizes[0])
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not an integer; give one value such as 8") from None


def one_tp(value: str) -> int:
    """--tp where a command prices one layout (comm, memory, flops and check sweep it)."""
    return _one_size(
        value, "TP", "comm, memory, flops and check take a list such as 1,2,4,8, one row each"
    )


def one_dp(value: str) -> int:
    """--dp where a command prices one layout (dp and zero sweep it)."""
    return _one_size(value, "DP", "dp and zero take a list such as 8,64, one row each")


def one_pp(value: str) -> int:
    """--pp where a command prices one layout (pipeline sweeps it)."""
    return _one_size(value, "PP", "pipeline takes a list such as 4,8,16, one row each")


def one_cp(value: str) -> int:
    """--cp where a command prices one layout (cp sweeps it)."""
    return _one_size(value, "CP", "cp takes a list such as 2,4,8, one row each")


def one_ep(value: str) -> int:
    """--ep where a command prices one layout (ep sweeps it)."""
    return _one_size(value, "EP", "ep takes a list such as 8,64, one row each")


DpOpt = Annotated[int, typer.Option("--dp", parser=one_dp, metavar="D", help="Data-parallel size.")]
PpOpt = Annotated[
    int, typer.Option("--pp", parser=one_pp, metavar="P", help="Pipeline-parallel size.")
]
CpOpt = Annotated[
    int,
    typer.Option(
        "--cp",
        parser=one_cp,
        metavar="C",
        help="Context-parallel size (each rank holds s/cp tokens of a sequence).",
    ),
]
EpOpt = Annotated[
    int,
    typer.Option(
        "--ep",
        parser=one_ep,
        metavar="E",
        help="Expert-parallel size (taken from the dp·cp ranks).",
    ),
]
ZeroStageOpt = Annotated[int, typer.Option("--zero", help="ZeRO stage 0|1|2|3 over the DP ranks.")]
WorldSizeOpt = Annotated[
    int | None,
    typer.Option("--world-size", help="GPUs in the job; must equal tp·cp·pp·dp (default: that)."),
]


TpIntOpt = Annotated[
    int,
    typer.Option(
        "--tp",
        "-t",
        parser=one_tp,
        metavar="T",
        help="Tensor-parallel size, TP innermost. The same option as in comm or memory; this "
        "command prices one layout, so one value.",
    ),
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
        "megatron18 = 2+4+12 with fp32 grads (Megatron); bf16-moments = 2+4+4+2+2 "
        "(--use-precision-aware-optimizer, DeepSeek-V3 §3.3.3); bf16-grads-moments = 2+2+4+2+2; "
        "bf16-states = 2+2+2+2 (Apex DistributedFusedAdam with dtype bf16, no master copy: "
        "NeMo 1.x optim.dtype bf16); "
        "fp8-params = 1+4+12 (TE FP8 param gather); fp8-params-bf16-moments = 1+4+4+2+2. "
        "FP8 weights as Transformer Engine stores them: fp8-params is per-tensor FP8 on "
        "Blackwell; fp8-params-transpose = 2+4+12 (per-tensor FP8 on Hopper keeps a transpose); "
        "mxfp8-params = 2.0625+4+12 (MXFP8: two copies + E8M0 scales); the -bf16-grads variants "
        "take 2-byte grads. Example: --state-recipe bf16-moments",
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
EtpOpt = Annotated[
    int,
    typer.Option(
        "--etp",
        help="Expert tensor-parallel size (Megatron --expert-tensor-parallel-size); experts are "
        "split over ep·etp ranks, expert-DP = dp·cp·tp/(ep·etp). Above 1 every MoE layer "
        "all-gathers its token copies over the etp ranks and reduce-scatters the outputs, each "
        "pass (priced with the all-to-all). Example: --tp 2 --ep 8 --etp 1.",
    ),
]
RecomputeModulesOpt = Annotated[
    str | None,
    typer.Option(
        "--recompute-modules",
        help="Megatron fine-grained recompute (transformer_config.py recompute_modules), comma "
        "list of core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts; it "
        "replaces --recompute selective's default (core_attn). Example: "
        "--recompute-modules layernorm,mla_up_proj,moe_act",
    ),
]
Fp8CacheOpt = Annotated[
    bool,
    typer.Option(
        "--fp8-cache/--no-fp8-cache",
        help="Keep Linear inputs and the SwiGLU input in FP8 for backward (DeepSeek-V3 §3.3.2). "
        "Example: --fp8-cache",
    ),
]
ProbsInActOpt = Annotated[
    bool,
    typer.Option(
        "--moe-probs-in-act/--no-moe-probs-in-act",
        help="Router probabilities applied inside the expert SwiGLU (Megatron-Core "
        "activation_func_with_probs, always so since core_v0.13.0), so the combine keeps no "
        "expert output; --no-moe-probs-in-act: weighted at the combine, which keeps every "
        "expert output (older Megatron-Core). Example: --no-moe-probs-in-act",
    ),
]
AttentionOpt = Annotated[
    AttentionKernel,
    typer.Option(
        "--attention",
        help="Attention kernel: 'flash' (FlashAttention / cuDNN fused attention: the s x s scores "
        "are never stored) or 'eager' (Megatron's own attention, the only one before "
        "FlashAttention: QK^T, a fused scale-mask-softmax, dropout on the probabilities, then x V, "
        "the scores materialised in memory and timed as batched GEMMs and memory-bound kernels; "
        "needs --cp 1). 'sdpa-math' is PyTorch's CPU math kernel (memory as measured on CPU, "
        "timed as eager). Example: --attention eager",
    ),
]
DropoutOpt = Annotated[
    bool | None,
    typer.Option(
        "--dropout/--no-dropout",
        help="Train with dropout: its masks are kept for backward (memory), and written and "
        "read by the step's dropout kernels (time). Default: what the model config states "
        "(tpcalc.dropout, e.g. off for Nemotron), else on for GPT-style models (LayerNorm, "
        "non-gated MLP), off for Llama-style. Example: --no-dropout",
        show_default=False,
    ),
]
MtpOpt = Annotated[
    bool,
    typer.Option(
        "--mtp/--no-mtp",
        help="Count the model's MTP module (parameters and activations, last stage; DeepSeek-V3 "
        "§2.2, §3.2). Example: --no-mtp",
    ),
]
Fp8LinearInputsOpt = Annotated[
    bool | None,
    typer.Option(
        "--fp8-linear-inputs/--no-fp8-linear-inputs",
        help="Keep each Linear's input in FP8 for backward, as Transformer Engine's FP8 recipes "
        "do (module/linear.py saves the quantized input). Default: on with --dtype fp8, off "
        "otherwise. Example: --no-fp8-linear-inputs",
        show_default=False,
    ),
]
OffloadLayersOpt = Annotated[
    int,
    typer.Option(
        "--offload-layers",
        help="Layers per rank whose activations wait in host memory (Megatron "
        "--cpu-offloading-num-layers). Example: --offload-layers 2",
    ),
]


LossKernelOpt = Annotated[
    LossKernel,
    typer.Option(
        "--loss-kernel",
        help="The last stage's cross-entropy kernel, which decides the bytes per logit it holds: "
        "'fp32-copy' (one FP32 copy, seed 003 §7.3.4), 'megatron' (Megatron-Core's "
        "vocab-parallel cross-entropy: the BF16 logits beside their FP32 copy, 6 B) or 'te' "
        "(Transformer Engine, cross_entropy_fusion_impl te: the BF16 logits alone, 2 B). "
        "Example: --loss-kernel te",
    ),
]
DispatcherOpt = Annotated[
    MoeDispatcher,
    typer.Option(
        "--moe-dispatcher",
        help="Megatron-Core MoE token dispatcher: 'alltoall' (each copy to its expert's rank), "
        "'allgather' (every rank gathers the group's tokens) or 'flex' (DeepEP/HybridEP: a token "
        "crosses the network once per remote node; priced by the step time, memory as "
        "alltoall). Example: --moe-dispatcher flex",
    ),
]
CapacityFactorOpt = Annotated[
    float | None,
    typer.Option(
        "--capacity-factor",
        help="Expert capacity factor with token dropping and padding (Megatron "
        "--moe-expert-capacity-factor; off by default: no dropping). "
        "Example: --capacity-factor 1.25",
    ),
]
RouterDtypeOpt = Annotated[
    RouterDtype,
    typer.Option(
        "--router-dtype",
        help="dtype of the router scores kept for backward (Megatron --moe-router-dtype; fp32 "
        "is tpcalc's default, bf16 when unset in Megatron). Example: --router-dtype fp64",
    ),
]
