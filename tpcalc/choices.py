"""The choices the command line offers, kept free of calculators so that `tpcalc CMD --help`
imports none (issue 12 §6). Each enum stays documented where it is defined; the calculators
that interpret a choice import it from here.
"""

from __future__ import annotations

from enum import Enum

# Defaults the command line shows in --help.
# Megatron-LM --make-vocab-size-divisible-by default (megatron/training/arguments.py).
DEFAULT_VOCAB_PAD_MULTIPLE = 128
# PyTorch DistributedDataParallel(bucket_cap_mb=25): gradients are all-reduced in 25 MiB buckets
# as the backward pass fills them (Li et al. 2020, "PyTorch Distributed", §3.2.3; seed 000).
DDP_BUCKET_MIB = 25
DEFAULT_EP = "8,64"  # inside one 8-GPU node, and seed 000's DeepSeek-V3 EP 64
# tpcalc plan: the Pareto front's slowest point is at most this many times the best step time;
# past that a layout saves memory at a cost no run would pay (Llama 3 405B on 16,384 H100: the
# whole front ends at 0.4 GB per rank and 4,193 times the best step). --objective memory ranks
# by memory alone at any speed; inf (--pareto-within 0) gives the whole front.
PARETO_WITHIN = 3.0


class ActivationModel(str, Enum):
    """Which activation count a result uses (the other is shown beside it where it fits)."""

    paper = "paper"  # Korthikanti et al. 2022 Table 2, the seeds' formula (a GPT-3 layer)
    exact = "exact"  # per-tensor inventory of what autograd saves (tpcalc.calc.activations.exact)


class AttentionFlops(str, Enum):
    """Which attention-score FLOPs convention: ``full`` s² (Narayanan et al. 2021 Eq. 3, the
    seeds) or ``causal`` s²/2 (Megatron-LM's count: the masked half is skipped)."""

    full = "full"
    causal = "causal"


class AttentionKernel(str, Enum):
    """How core attention (scores, softmax, weighted sum of V) is computed.

    - ``flash``: a fused kernel that never stores the s x s scores and keeps q, k, v, the output
      and the fp32 row log-sum-exp (FlashAttention-2/3, cuDNN fused attention via TE on GPU;
      ``F.scaled_dot_product_attention`` on CPU, which picks PyTorch's CPU flash kernel and saves
      exactly that set: it is measured, see tools/measure_activations.py).
    - ``eager``: Megatron's unfused path: QKᵀ, a fused scale-mask-softmax that keeps its output,
      dropout on the probabilities, then probabilities x V (Korthikanti et al. 2022 §4.1).
    - ``sdpa_math``: PyTorch's reference math kernel for SDPA, as it runs on CPU: it up-casts q, k
      and v to fp32 (k and v repeated to all query heads for GQA) and keeps fp32 probabilities
      (and an fp32 dropout mask and output when dropout is on). Measured on CPU.
    """

    flash = "flash"
    eager = "eager"
    sdpa_math = "sdpa-math"


class LossKernel(str, Enum):
    """The cross-entropy kernel of the last stage, which decides how many bytes per logit
    ([tokens, V/tp] per rank) the loss holds at its peak:

    - ``fp32-copy`` (the default, the seeds' convention): one FP32 copy (seed 003 §7.3.4), 4 B.
    - ``megatron``: Megatron-Core's vocab-parallel cross-entropy, fused or not
      (``megatron/core/tensor_parallel/cross_entropy.py``, ``calculate_logits_max``): it takes
      ``.float()`` of the 16-bit logits, which the model holds until the loss returns, and its
      FP32 gradient is cast back to the logits' dtype in backward: 2 + 4 B.
    - ``te``: Transformer Engine's ``parallel_cross_entropy``
      (``transformer_engine/pytorch/cross_entropy.py``; Megatron ``cross_entropy_fusion_impl
      te``): it saves the 16-bit logits and returns their gradient in the same tensor, 2 B.
    """

    fp32_copy = "fp32-copy"
    megatron = "megatron"
    te = "te"


class EpRouting(str, Enum):
    """How a token's k expert copies are spread over nodes (see the module docstring)."""

    uniform = "uniform"
    node_limited = "node-limited"


class FullRecomputeSharding(str, Enum):
    """Whether the kept layer input under full recompute is divided by t when SP is on."""

    paper = "paper"  # Table 2: 2sbh per layer, not divided by t
    sp = "sp"  # with SP the layer input is sharded along s: 2sbh/t


class LinkChoice(str, Enum):
    """Which link a group's collectives are priced on: placed by rank order, or forced."""

    auto = "auto"  # the slowest link the group crosses (tpcalc.calc.links.link.link_for_group)
    nvlink = "nvlink"
    ib = "ib"


class MoeDispatcher(str, Enum):
    """Megatron-Core --moe-token-dispatcher-type: ``alltoall`` sends each token copy to the rank
    of its expert; ``allgather`` gathers every token of the group on every rank; ``flex``
    (DeepEP / HybridEP) sends a token across the network once per remote node holding one of
    its experts and forwards it over NVLink there (DeepSeek-V3 report §3.2.1). Memory and the
    per-rank bytes of ``tpcalc ep`` count ``flex`` as ``alltoall`` (the same copies arrive);
    the step time prices its network leg (calc/time/roofline.dispatch_time_s)."""

    alltoall = "alltoall"
    allgather = "allgather"
    flex = "flex"


class ParamConvention(str, Enum):
    """Which parameter count N goes into 6·N·tokens and 16 B/param model states.

    - ``all``: every parameter of the checkpoint (embedding, vision tower, MTP included);
      seed 003 §7.3.5 uses 6 × 705.5 亿 × 8,192.
    - ``matmul``: decoder layers + final norm + LM head only (seed 000, 6 × 25,624,600,064 × 4,096):
      the input embedding is a lookup, not a matmul; the vision tower and MTP are left out.
    """

    all = "all"
    matmul = "matmul"


class Recompute(str, Enum):
    """Activation recomputation (Korthikanti et al. 2022 §5)."""

    none = "none"
    selective = "selective"
    full = "full"


class RouterDtype(str, Enum):
    """dtype of the router logits/scores the MoE router keeps (Megatron --moe-router-dtype:
    fp32 or fp64; without it the router runs in the model's bf16)."""

    fp32 = "fp32"
    fp64 = "fp64"
    bf16 = "bf16"

    @property
    def bytes(self) -> int:
        """Bytes per element."""
        return ROUTER_DTYPE_BYTES[self.value]


ROUTER_DTYPE_BYTES = {"fp32": 4, "fp64": 8, "bf16": 2}


class Schedule(str, Enum):
    """Pipeline schedules tpcalc prices."""

    one_f_one_b = "1f1b"
    interleaved = "interleaved"
    zb_h1 = "zb-h1"
    dualpipe = "dualpipe"
    gpipe = "gpipe"


class SoftmaxDtype(str, Enum):
    """dtype of the materialised attention probabilities (eager attention only).

    ``bf16``: Megatron's fused scale-mask-softmax kernel computes in fp32 but stores bf16 output.
    ``fp32``: the unfused path with ``attention_softmax_in_fp32`` (and Hugging Face eager
    attention) stores fp32 probabilities, plus a bf16 copy for probabilities x V when no dropout
    follows (dropout's output is that copy otherwise).
    """

    bf16 = "bf16"
    fp32 = "fp32"


class StateRecipe(str, Enum):
    """How many bytes each parameter's model states take (see the module docstring)."""

    zero16 = "zero16"
    megatron18 = "megatron18"
    # Megatron --use-precision-aware-optimizer variants and TE FP8 parameters (sources below)
    bf16_moments = "bf16-moments"
    bf16_grads_moments = "bf16-grads-moments"
    # Apex DistributedFusedAdam with dtype bf16 (NeMo 1.x's distributed_fused_adam, optim.dtype)
    bf16_states = "bf16-states"
    fp8_params = "fp8-params"
    fp8_params_bf16_moments = "fp8-params-bf16-moments"
    # Transformer Engine FP8 primary weights as each format and GPU stores them
    # (tpcalc.calc.params.states.WEIGHT_STORAGE): per-tensor FP8 with its transpose (Hopper),
    # MXFP8 (both copies + E8M0 scales); the -bf16-grads variants keep BF16 gradients
    # (grad_reduce_in_fp32 = False, as Megatron-Bridge's performance recipes set it).
    fp8_params_transpose = "fp8-params-transpose"
    mxfp8_params = "mxfp8-params"
    fp8_params_bf16_grads = "fp8-params-bf16-grads"
    fp8_params_transpose_bf16_grads = "fp8-params-transpose-bf16-grads"
    mxfp8_params_bf16_grads = "mxfp8-params-bf16-grads"


class TimeModel(str, Enum):
    """How a layout's step is timed."""

    roofline = "roofline"  # per-operation roofline + overlap (tpcalc.calc.time.step)
    fixed = "fixed"  # the seeds' convention: the card's achieved FLOP/s, comm as layout.comm


class PlanObjective(str, Enum):
    """What ``tpcalc plan`` ranks by (the planner's ``tpcalc.calc.plan.types.Objective``)."""

    time = "time"  # shortest predicted step time
    memory = "memory"  # lowest memory per rank; step time breaks ties
    gpus = "gpus"  # fewest GPUs whose best layout reaches --target-step-time


class Fp8Format(str, Enum):
    """How Transformer Engine scales an FP8 tensor, which sets how an FP8 weight is stored.

    ``per-tensor``: one FP32 scale per tensor (delayed and current scaling; TE ``Float8Tensor``).
    ``mxfp8``: one E8M0 scale per 32 elements, rowwise and columnwise copies (``MXFP8Tensor``).
    """

    per_tensor = "per-tensor"
    mxfp8 = "mxfp8"
