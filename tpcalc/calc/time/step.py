"""One training step on one layout: per-stage F, B, W from the per-operation roofline, the
communication each stage cannot hide, the pipeline schedule over the stages, the data-parallel
tail and the optimizer.

A micro-batch on stage s costs F_s, B_s, W_s: the roofline times of its ops (``ops``,
``roofline``) in that pass, scaled by the card's one fitted constant, and the exposed
part of its TP, CP and EP collectives. The step is

    step = m · (F + B + W)_bottleneck + bubble + exposed p2p + DP tail + optimizer
           + link contention

with the bubble of the schedule over the mean stage times (``pipeline.bubble_time_s``:
GPipe/1F1B, interleaved, ZB-H1, DualPipe), so the parts add up to the step by construction.

Link contention: hiding a collective under compute does not widen the link it crosses. The
collectives that share a link class (each GPU's NIC for groups that cross nodes, NVLink inside
one) add their times on it, each at the bandwidth it would get alone, and a step is at least as
long as its busiest link is busy (the roofline, Williams et al. 2009, applied to a link instead
of HBM; the DeepSeek-V3 report §3.2.1-3.2.2 budgets its all-to-all against the same per-GPU IB
bandwidth the other traffic uses). What the busiest link carries beyond the rest of the step is
the last part; where no link is that busy it is zero.

What real frameworks overlap, each an explicit ``Overlap`` flag with its source:
- TP: exposed unless ``tp_comm`` (Transformer Engine userbuffers, Megatron --tp-comm-overlap):
  then the collective is cut into t chunks pipelined with its GEMMs (Wang et al. 2022, ASPLOS,
  "Overlap communication with dependent computation via decomposition"), so one chunk plus
  whatever exceeds the GEMM time is exposed.
- CP: the ring sends of K, V (and dK, dV) run under the attention blocks (Liu et al. 2023, Ring
  Attention §3; Transformer Engine context parallelism): exposed only beyond the attention time.
  A Gated DeltaNet layer has no ring: its two all-to-alls to the heads and back per pass
  (``tpcalc.calc.cp.linear``, Megatron-Core) are exposed.
- EP: the all-to-all is exposed unless ``ep_a2a`` (DualPipe, DeepSeek-V3 report §3.2.1, or
  Megatron's batch-level EP overlap where Megatron-Core allows it, ``ep.overlap``), then only
  beyond the expert compute; with expert TP the dispatcher's gather and scatter over the etp
  ranks (``roofline.expert_tp_time_s``) go with it.
- PP: sends run beside compute (Megatron overlap_p2p_comm); exposed are those the schedule's
  order puts on the critical path (``pipeline.schedule.exposed_sends``, from the simulated
  order: the fill and drain, 2(p−1), or 2(p·v−1) interleaved, and in 1F1B the steady state's
  round trips, each pass waiting on a neighbour's pass that has just ended). Where the last
  stage holds its own copy of the embedding (a tied head, or MTP), the first and last ranks
  all-reduce its gradient after the data-parallel reduction, exposed whole (Megatron-Core
  finalize_model_grads, ``_embedding_sync_s``).
- DP: gradient reduce-scatter (all-reduce without a distributed optimizer) runs in buckets
  under the backward of the last micro-batch, parameter all-gather under the first forward
  (Megatron DDP overlap_grad_reduce / overlap_param_gather; Li et al. 2020, PyTorch DDP §3.2.3):
  the last (first) bucket and what exceeds the pass are exposed. ZeRO-2 shards the gradients,
  so every micro-batch's gradients are reduce-scattered after its backward; ZeRO-3 also shards
  the parameters, so every micro-batch gathers them before its forward and again before its
  backward (Rajbhandari et al. 2020 §5.2, §7.2.2: 1.5x the data-parallel volume per
  micro-batch; DeepSpeed ZeRO stage 2/3 reduce after each backward): each runs under its own
  micro-batch's pass, and only what that pass cannot cover is exposed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from functools import cache

from msgspec import Struct, field
from msgspec.structs import astuple, replace

from tpcalc.calc.activations.exact.options import model_dropout
from tpcalc.calc.cp.linear import gdn_cp_messages
from tpcalc.calc.dp.stage import ZeroStage
from tpcalc.calc.ep.overlap import a2a_overlap_problem
from tpcalc.calc.layout.groups import (
    Group,
    LayoutRun,
    MemoryTechniques,
    ParallelLayout,
    expert_dp_group,
    expert_tp_group,
    place_groups,
)
from tpcalc.calc.links.collectives import Collective
from tpcalc.calc.links.link import Link
from tpcalc.calc.params.counts import (
    EMBEDDING_GROUP_RANKS,
    declared_params,
    embedding_params,
    final_norm_params,
    last_stage_embedding_copy,
    last_stage_extra_params,
    layer_params,
    lm_head_params,
    routed_layer_params,
)
from tpcalc.calc.pipeline.schedule import (
    DUALPIPE_DIRECTIONS,
    StageTimes,
    bubble_time_s,
    pp_send_count,
    rank_layers,
    stage_split,
)
from tpcalc.calc.time.ops import (
    UNFUSED_PARTS,
    Op,
    OpKind,
    Pass,
    Shard,
    embedding_ops,
    head_ops,
    layer_ops,
    mtp_ops,
)
from tpcalc.calc.time.roofline import (
    Rates,
    collective_time_s,
    dispatch_time_s,
    expert_tp_time_s,
    moe_layer_overhead,
    op_time_s,
    rates,
)
from tpcalc.calc.tp.blocks import tp_blocks
from tpcalc.calc.tp.rules import padded_vocab
from tpcalc.choices import (
    DEFAULT_VOCAB_PAD_MULTIPLE,
    AttentionKernel,
    Recompute,
    RouterDtype,
    Schedule,
)
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.units import Dtype

# Megatron-Core DistributedDataParallelConfig: bucket_size = max(40M, 1M·dp) parameters when
# gradient reduction overlaps the backward (megatron/core/distributed/distributed_data_parallel.py).
DDP_BUCKET_MIN_PARAMS = 40_000_000
DDP_BUCKET_PARAMS_PER_DP_RANK = 1_000_000
# Adam step on the rank's optimizer shard, fp32 master weights (Megatron distributed optimizer;
# Kingma & Ba 2015): read param, grad, m, v (4 × 4 B), write param, m, v (3 × 4 B) and the BF16
# model copy (2 B); the gradient-norm pass for clipping reads the grad again (4 B).
ADAM_BYTES_PER_PARAM = 4 * 4 + 3 * 4 + 2 + 4
KV_TENSORS = 2  # K and V travel the CP ring; the backward also sends dK and dV
A2A_PER_PASS = 2  # dispatch and combine (Megatron-Core MoEAlltoAllTokenDispatcher)

SRC_STEP = (
    "Narayanan et al. 2021 §2.2 (m micro-batches + bubble); Qi et al. 2023 §2 (F, B, W); "
    "per-operation roofline (Williams et al. 2009) with the card's kernel efficiencies"
)


class Overlap(Struct, frozen=True, kw_only=True):
    """Which communication runs under compute (module docstring, with sources)."""

    tp_comm: bool = False
    cp_ring: bool = True
    ep_a2a: bool | None = None  # None: on with the DualPipe schedule, which is built for it
    pp_p2p: bool = True
    dp_grad_reduce: bool = True
    dp_param_gather: bool = True


class TimeOptions(Struct, frozen=True, kw_only=True):
    """Modelling choices of the step-time model; every one is echoed in the output."""

    overlap: Overlap = field(default_factory=Overlap)
    causal: bool = True  # the kernels skip the masked half of the scores (a decoder)
    fused_sinks: bool = True  # attention sinks run in a fused kernel (else materialised scores)
    # MFU's model FLOPs count the attention scores causal (s²/2, Megatron-LM) or full (s², the
    # seeds, Narayanan et al. 2021 Eq. 3): a counting convention, not work (--attention-flops)
    causal_model_flops: bool = True
    vocab_pad_multiple: int = DEFAULT_VOCAB_PAD_MULTIPLE
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    # Megatron-Core --pipeline-model-parallel-layout: the decoder layers of each of the pp·vpp
    # virtual stages in order (stage c on rank c mod pp); None splits evenly.
    chunk_layers: tuple[int, ...] | None = None
    # Megatron-Core account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split:
    # the embedding / the loss count as one layer each in the split (pipeline.accounted_split).
    embedding_in_split: bool = False
    loss_in_split: bool = False
    grad_reduce_dtype: Dtype = Dtype.bf16
    # Megatron --recompute-granularity full --recompute-method block --recompute-num-layers N:
    # the first N layers of every model chunk recompute their whole forward.
    recompute_layers: int | None = None
    # A node-aware MoE dispatcher (DeepEP / HybridEP, Megatron --moe-token-dispatcher-type
    # flex): a token crosses the network once per remote node (roofline.dispatch_time_s).
    ep_node_dedup: bool = False
    # Megatron-LM's --scatter-gather-tensors-in-pipeline (on by default in its 2021-2022 code;
    # Narayanan et al. 2021 §4.1): without SP, each TP rank sends 1/t of the activation to the
    # next stage over its own link and the receivers all-gather the pieces over the TP group
    pp_scatter_gather: bool = False
    efficiency_scale: float = 1.0  # multiplies every compute efficiency (what-if, properties)
    comm_scale: float = 1.0  # multiplies every collective's bytes (what-if, properties)


class Work(Struct, frozen=True):
    """Seconds one stage spends on one micro-batch in one pass, by what it is spent on."""

    gemm_s: float = 0.0
    attention_s: float = 0.0
    memory_s: float = 0.0
    overhead_s: float = 0.0
    tp_s: float = 0.0
    cp_s: float = 0.0
    ep_s: float = 0.0
    # The same collectives before overlap (not part of total_s: only their exposed part is).
    tp_comm_s: float = 0.0
    cp_comm_s: float = 0.0
    ep_comm_s: float = 0.0  # the EP all-to-alls
    etp_comm_s: float = 0.0  # the expert-TP gathers and scatters, hidden or not with the EP ones

    @property
    def total_s(self) -> float:
        return (
            self.gemm_s + self.attention_s + self.memory_s + self.overhead_s
            + self.tp_s + self.cp_s + self.ep_s
        )  # fmt: skip

    def __add__(self, other: Work) -> Work:
        return Work(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def scaled(self, k: float) -> Work:
        return Work(*(a * k for a in astuple(self)))


ZERO_WORK = Work()


class StageWork(Struct, frozen=True):
    """One micro-batch on one pipeline rank: forward, backward-input (with any recompute) and
    backward-weight work, and the parameters it holds (dense, routed experts)."""

    stage: int
    layers: int
    forward: Work
    backward_input: Work
    backward_weight: Work
    recompute: Work
    dense_params: int
    expert_params: int

    @property
    def times(self) -> StageTimes:
        b = self.backward_input.total_s + self.recompute.total_s
        return StageTimes(self.forward.total_s, b, self.backward_weight.total_s)

    @property
    def total_s(self) -> float:
        return self.times.full_s

    @property
    def work(self) -> Work:
        return self.forward + self.backward_input + self.backward_weight


class OpTime(Struct, frozen=True):
    """One op of the bottleneck stage with its roofline time (for --explain)."""

    op: Op
    time_s: float
    compute_bound: bool
    count: int  # how many times it runs per micro-batch on the stage (its layers)


class StepTime(Struct, frozen=True):
    """A step, in parts that add up to ``step_time_s``, and the rates derived from it."""

    gemm_time_s: float
    attention_time_s: float
    memory_bound_time_s: float
    moe_overhead_time_s: float
    recompute_time_s: float
    tp_exposed_time_s: float
    cp_exposed_time_s: float
    ep_exposed_time_s: float
    bubble_time_s: float
    pp_exposed_time_s: float
    dp_exposed_time_s: float
    optimizer_time_s: float
    link_contention_time_s: float
    step_time_s: float
    tokens_per_step: int
    tokens_per_s_per_gpu: float
    model_flop_per_step: float
    model_flop_per_s_per_gpu: float
    mfu_ratio: float
    hardware_flop_per_step: float
    hfu_ratio: float
    tp_comm_time_s: float
    cp_comm_time_s: float
    ep_comm_time_s: float
    pp_comm_time_s: float
    dp_comm_time_s: float
    # the slowest pipeline rank and its F, B, W of one micro-batch (DualPipe: the mean of the
    # rank's two stages, ``dualpipe_ranks``)
    bottleneck_stage: int
    stage_forward_time_s: float  # F of one micro-batch on the bottleneck stage
    stage_backward_input_time_s: float  # B, with recomputation
    stage_backward_weight_time_s: float  # W
    stages: tuple[StageWork, ...] = ()  # each pipeline rank's work (DualPipe: both stages')
    bottleneck_ops: tuple[OpTime, ...] = ()  # the ops of the bottleneck rank's stage
    paired_ops: tuple[OpTime, ...] = ()  # DualPipe: the ops of its other stage, p − 1 − rank

    @property
    def parts_s(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in STEP_PARTS}


STEP_PARTS = (
    "gemm_time_s",
    "attention_time_s",
    "memory_bound_time_s",
    "moe_overhead_time_s",
    "recompute_time_s",
    "tp_exposed_time_s",
    "cp_exposed_time_s",
    "ep_exposed_time_s",
    "bubble_time_s",
    "pp_exposed_time_s",
    "dp_exposed_time_s",
    "optimizer_time_s",
    "link_contention_time_s",
)


# ---- pipeline split ----


def stage_layers(
    num_layers: int,
    pp: int,
    vpp: int = 1,
    *,
    first: int | None = None,
    last: int | None = None,
    chunks: tuple[int, ...] | None = None,
) -> list[list[int]]:
    """Decoder layer indices of each pipeline rank (its v chunks in order), split as
    ``pipeline.stage_split`` says (even by default)."""
    counts = stage_split(num_layers, pp, vpp, first=first, last=last, chunks=chunks)
    return rank_layers(num_layers, pp, vpp, counts)


def split_of(opts: TimeOptions, num_layers: int, pp: int, vpp: int) -> tuple[int, ...]:
    """The decoder layers of each virtual stage under ``opts``: even, or set by hand (first/last
    stage layers, a pipeline layout, the embedding and loss counted as layers)."""
    return stage_split(
        num_layers, pp, vpp, first=opts.first_stage_layers, last=opts.last_stage_layers,
        chunks=opts.chunk_layers, embedding=opts.embedding_in_split, loss=opts.loss_in_split,
    )  # fmt: skip


def split_by_hand(opts: TimeOptions) -> bool:
    """Whether ``opts`` set the stage split by hand rather than leaving it even."""
    return (
        opts.first_stage_layers is not None or opts.last_stage_layers is not None
        or bool(opts.chunk_layers) or opts.embedding_in_split or opts.loss_in_split
    )  # fmt: skip


def hand_split(opts: TimeOptions, num_layers: int, pp: int, vpp: int) -> tuple[int, ...] | None:
    """The decoder layers of each virtual stage when ``opts`` set the split by hand, None for
    the even split."""
    return split_of(opts, num_layers, pp, vpp) if split_by_hand(opts) else None


# ---- per-pass work of a set of ops ----


def _pass_work(ops: Iterable[Op], phase: Pass, r: Rates, count: int) -> Work:
    gemm = attn = mem = 0.0
    for op in ops:
        if op.phase is not phase:
            continue
        t = op_time_s(op, r)
        if op.kind is OpKind.gemm:
            gemm += t
        elif op.kind is OpKind.attention:
            attn += t
        else:
            mem += t
    return Work(gemm_s=gemm * count, attention_s=attn * count, memory_s=mem * count)


def _gemm_s(ops: Iterable[Op], phase: Pass, r: Rates, names: tuple[str, ...]) -> float:
    return sum(op_time_s(o, r) for o in ops if o.phase is phase and o.name in names)


def attention_pass_s(ops: Iterable[Op], phase: Pass, r: Rates) -> float:
    """Seconds of the attention kernels among ``ops`` in one pass (what the CP ring hides under)."""
    return sum(op_time_s(o, r) for o in ops if o.phase is phase and o.kind is OpKind.attention)


def exposed_s(
    comm_s: float,
    hidden_under_s: float,
    overlapped: bool,
    first_chunk_s: float = 0.0,
    *,
    sm_share: float,
) -> float:
    """What a collective adds to the critical path: all of it; or, overlapped, its first chunk
    plus the larger of what the compute it runs under cannot cover and what the SMs its kernels
    hold take from that compute. With a share s of the SMs held for the overlapped time H, the
    compute C beside it finishes at C + s·H, so the pair takes max(H, C + s·H) and adds
    max(H − C, s·H) to C (DeepSeek-V3 report §3.2.1: 20 SMs run the communication beside the
    compute). Never more than the collective itself (s ≤ 1), and never less than before."""
    if not overlapped:
        return comm_s
    rest = comm_s - first_chunk_s
    return first_chunk_s + max(rest - hidden_under_s, sm_share * rest, 0.0)


TP_GEMMS = ("qkv_proj", "out_proj", "q_proj", "q_up_proj", "kv_up_proj", "fc1", "fc2",
            "shared_fc1", "shared_fc2", "in_proj")  # fmt: skip


class _Ctx(Struct, frozen=True):
    spec: ModelSpec
    layout: ParallelLayout
    shard: Shard
    r: Rates
    opts: TimeOptions
    links: dict[str, Group]  # place_groups' tp, cp, dp, pp, ep, the expert groups edp and etp
    ep_overlap: bool
    microbatches: int = 1  # per step (the run's gradient-accumulation steps)
    router_bytes: int = RouterDtype.fp32.bytes  # per element of the routing probabilities
    # One layer kind's work and parameters, computed once per step for every stage holding it.
    kinds: dict[tuple[str, bool], _LayerKind] = field(default_factory=dict)


class _LayerKind(Struct, frozen=True):
    forward: Work
    backward_input: Work
    backward_weight: Work
    ops: tuple[Op, ...]
    params: int
    routed_params: int


def _layer_kind(ctx: _Ctx, i: int) -> tuple[tuple[str, bool], _LayerKind]:
    """Layer i's kind (its mixer type, MoE or not) and that kind's work, computed once."""
    key = (ctx.spec.resolved_layer_types[i], ctx.spec.is_moe_layer(i))
    if key not in ctx.kinds:
        f, b, w, ops = _layer_work(ctx, i)
        ctx.kinds[key] = _LayerKind(
            f, b, w, ops, layer_params(ctx.spec, i), routed_layer_params(ctx.spec, i)
        )
    return key, ctx.kinds[key]


def _layer_work(ctx: _Ctx, i: int) -> tuple[Work, Work, Work, tuple[Op, ...]]:
    """(F, B, W, ops) of layer i on one micro-batch, the exposed communication included."""
    spec, shard, r, ov = ctx.spec, ctx.shard, ctx.r, ctx.opts.overlap
    ops = layer_ops(spec, shard, i)
    f = _pass_work(ops, Pass.forward, r, 1)
    b = _pass_work(ops, Pass.backward_input, r, 1)
    w = _pass_work(ops, Pass.backward_weight, r, 1)
    if spec.is_moe_layer(i):  # the card's fitted cost of a dropless MoE layer, per pass
        over = Work(overhead_s=moe_layer_overhead(r, shard.tokens))
        f, b = f + over, b + over
    scale = ctx.opts.comm_scale
    h_bytes = shard.tokens * spec.hidden_size * shard.dtype.bytes * scale
    # TP: with SP an all-gather and a reduce-scatter per block, else an all-reduce per block.
    tp = ctx.layout.tp
    moe = spec.is_moe_layer(i)
    blocks = tp_blocks(spec, moe)
    if shard.sp:
        one = collective_time_s(r, Collective.all_gather, h_bytes, tp, ctx.links["tp"].nodes)
        one += collective_time_s(r, Collective.reduce_scatter, h_bytes, tp, ctx.links["tp"].nodes)
    else:
        one = collective_time_s(r, Collective.all_reduce, h_bytes, tp, ctx.links["tp"].nodes)
    tp_pass = blocks * one
    sms = r.comm_sm_share
    tp_f = exposed_s(
        tp_pass, _gemm_s(ops, Pass.forward, r, TP_GEMMS), ov.tp_comm, tp_pass / tp, sm_share=sms
    )
    tp_b = exposed_s(
        tp_pass, _gemm_s(ops, Pass.backward_input, r, TP_GEMMS), ov.tp_comm, tp_pass / tp,
        sm_share=sms,
    )  # fmt: skip
    # CP: (cp−1) ring steps of this rank's K and V chunk; the backward also sends dK, dV. A
    # Gated DeltaNet layer passes no ring: two all-to-alls per pass, on its critical path.
    cp_f = cp_b = cp_comm = cp_comm_b = 0.0
    if ctx.layout.cp > 1 and spec.resolved_layer_types[i] == "linear_attention":
        cp_f = cp_b = cp_comm = cp_comm_b = gdn_cp_a2a_s(
            spec, shard, r, ctx.links["cp"].nodes, scale
        )
    elif ctx.layout.cp > 1:
        cp_comm = cp_ring_s(spec, shard, r, ctx.links["cp"].nodes, scale)
        cp_comm_b = KV_TENSORS * cp_comm
        attn_f = attention_pass_s(ops, Pass.forward, r)
        attn_b = attention_pass_s(ops, Pass.backward_input, r)
        cp_f = exposed_s(cp_comm, attn_f, ov.cp_ring, sm_share=sms)
        cp_b = exposed_s(cp_comm_b, attn_b, ov.cp_ring, sm_share=sms)
    # EP: dispatch and combine all-to-all of the k copies of this rank's T/t tokens; with
    # expert TP, the gather of those copies over the etp ranks and the scatter of the outputs.
    ep_f = ep_b = a2a = etp_s = 0.0
    lay = ctx.layout
    if moe and (lay.ep > 1 or lay.etp > 1):
        k, token_bytes = spec.num_experts_per_tok or 1, spec.hidden_size * shard.dtype.bytes * scale
        if lay.ep > 1:
            a2a = A2A_PER_PASS * dispatch_time_s(
                r, shard.tokens // tp, k, spec.n_routed_experts or 1, token_bytes, lay.ep,
                ctx.links["ep"].nodes, node_dedup=ctx.opts.ep_node_dedup,
            )  # fmt: skip
        etp_s = expert_tp_time_s(
            r, shard.tokens // tp * k, token_bytes, spec.hidden_size * ctx.router_bytes * scale,
            lay.etp, ctx.links["etp"].nodes,
        )  # fmt: skip
        # Overlapped, a micro-batch's forward all-to-alls run under another micro-batch's
        # backward of the same layer and vice versa (DeepSeek-V3 §3.2.1 DualPipe; Megatron-Core
        # --overlap-moe-expert-parallel-comm): hidden up to the other pass's compute. The
        # expert-TP collectives are the dispatcher's too: hidden or exposed with them.
        ep_f = exposed_s(a2a + etp_s, (b + w).total_s, ctx.ep_overlap, sm_share=sms)
        ep_b = exposed_s(a2a + etp_s, f.total_s, ctx.ep_overlap, sm_share=sms)
    f = f + Work(
        tp_s=tp_f, cp_s=cp_f, ep_s=ep_f, tp_comm_s=tp_pass, cp_comm_s=cp_comm, ep_comm_s=a2a,
        etp_comm_s=etp_s,
    )  # fmt: skip
    b = b + Work(
        tp_s=tp_b, cp_s=cp_b, ep_s=ep_b,
        tp_comm_s=tp_pass, cp_comm_s=cp_comm_b, ep_comm_s=a2a, etp_comm_s=etp_s,
    )  # fmt: skip
    return f, b, w, ops


def cp_ring_s(spec: ModelSpec, shard: Shard, r: Rates, nodes: int, comm_scale: float) -> float:
    """One pass of a layer's CP ring: cp − 1 p2p steps of this rank's K and V chunk (Liu et al.
    2023 §3; the backward sends dK and dV too, KV_TENSORS times this)."""
    kv = shard.tokens * kv_width(spec, shard.tp) * shard.dtype.bytes * comm_scale
    return (shard.cp - 1) * collective_time_s(r, Collective.p2p, kv, 2, min(2, nodes))


def gdn_cp_a2a_s(spec: ModelSpec, shard: Shard, r: Rates, nodes: int, comm_scale: float) -> float:
    """One pass of a Gated DeltaNet layer's CP all-to-alls (``tpcalc.calc.cp.linear``): the
    rank's s·b/cp tokens of in_proj's output to the heads, the gated norm's output back; the
    backward sends their gradients the other way, the same bytes. Megatron-Core runs them
    before the conv and after the norm, nothing beside them: exposed."""
    messages = gdn_cp_messages(spec, tokens=shard.tokens, tp=shard.tp, dtype=shard.dtype)
    return sum(
        collective_time_s(r, Collective.all_to_all, m * comm_scale, shard.cp, nodes)
        for m in messages
    )


def kv_width(spec: ModelSpec, tp: int) -> int:
    """K and V features per token on one TP rank (MLA: per-head nope+rope keys and v values)."""
    if spec.is_mla:
        heads = spec.num_attention_heads // tp
        return heads * (
            (spec.qk_nope_head_dim or 0) + (spec.qk_rope_head_dim or 0) + (spec.v_head_dim or 0)
        )
    return KV_TENSORS * max(1, spec.kv_heads // tp) * spec.head_dim_resolved


# Megatron-LM TransformerConfig.recompute_modules: the ops each module re-runs (tpcalc op names).
RECOMPUTE_MODULE_OPS: dict[str, tuple[str, ...]] = {
    # the fused kernel, or the materialised one's kernels (ops.unfused_attention), or GDN's
    "core_attn": ("core_attn", *(f"core_attn_{part}" for part in UNFUSED_PARTS), "delta_rule"),
    "layernorm": ("attn_norm", "mlp_norm", "qk_norm", "q_norm", "kv_norm"),
    "mla_up_proj": ("q_up_proj", "kv_up_proj"),
    "mlp": ("fc1", "act", "fc2"),
    "moe_act": ("expert_act",),
    "moe": (
        "router",
        "permute",
        "expert_fc1",
        "expert_act",
        "expert_fc2",
        "expert_bias",
        "unpermute",
    ),
    "shared_experts": ("shared_fc1", "shared_act", "shared_fc2"),
}


def _partial_recompute(ops: tuple[Op, ...], r: Rates, names: set[str]) -> Work:
    chosen = [o for o in ops if o.name in names or o.name.removesuffix("_fp8_cast") in names]
    return _pass_work(chosen, Pass.forward, r, 1)


def _recompute_names(recompute: Recompute, modules: tuple[str, ...]) -> set[str]:
    """Op names recomputation re-runs besides whole layers: the --recompute-modules, which
    replace selective's default core attention as in Megatron-LM (recompute_modules), or core
    attention alone under --recompute selective (Korthikanti et al. 2022 §5)."""
    default = ("core_attn",) if recompute is Recompute.selective else ()
    names: set[str] = set()
    modules = modules or default
    for module in modules:
        if module not in RECOMPUTE_MODULE_OPS:
            valid = ", ".join(RECOMPUTE_MODULE_OPS)
            raise InputError(f"--recompute-modules: unknown module '{module}'; valid: {valid}")
        names |= set(RECOMPUTE_MODULE_OPS[module])
    return names


def _full_share(recompute: Recompute, layers_n: int, vpp: int, block: int | None) -> float:
    """Share of the stage's layers that recompute their whole forward: all (full), or the
    first ``block`` of each of its vpp chunks (Megatron recompute-method block)."""
    if recompute is Recompute.full:
        return 1.0
    if block:
        return min(1.0, block * vpp / layers_n) if layers_n else 0.0
    return 0.0


def _stage_work(
    ctx: _Ctx, stage: int, layers: list[int], run: LayoutRun, padded: int
) -> tuple[StageWork, list[OpTime]]:
    """F, B, W of one micro-batch on one pipeline rank (its layers and, on the ends, the
    embedding and the LM head with the loss; Megatron recomputes transformer layers only)."""
    spec, layout = ctx.spec, ctx.layout
    full = _full_share(run.recompute, len(layers), run.vpp, ctx.opts.recompute_layers)
    names = _recompute_names(run.recompute, run.memory.recompute_modules)
    counts: dict[tuple[str, bool], int] = {}
    for i in layers:
        key, _ = _layer_kind(ctx, i)
        counts[key] = counts.get(key, 0) + 1
    fwd = bwd = wgt = rec = ZERO_WORK
    detail: list[OpTime] = []
    params = routed = 0
    for key, n in counts.items():
        k = ctx.kinds[key]
        rc = k.forward.scaled(full) + _partial_recompute(k.ops, ctx.r, names).scaled(1 - full)
        fwd, bwd, wgt, rec = (
            fwd + k.forward.scaled(n),
            bwd + k.backward_input.scaled(n),
            wgt + k.backward_weight.scaled(n),
            rec + rc.scaled(n),
        )
        params, routed = params + n * k.params, routed + n * k.routed_params
        detail += _op_times(k.ops, ctx.r, n)
    ends: tuple[Op, ...] = ()
    if stage == 0:
        ends += embedding_ops(spec, ctx.shard)
    if stage == layout.pp - 1:
        ends += head_ops(spec, ctx.shard, padded)
        if run.memory.mtp:
            for _ in range(spec.mtp_layers):
                ends += mtp_ops(spec, ctx.shard, padded)
    if ends:
        fwd = fwd + _pass_work(ends, Pass.forward, ctx.r, 1)
        bwd = bwd + _pass_work(ends, Pass.backward_input, ctx.r, 1)
        if (
            stage == layout.pp - 1
            and run.memory.mtp
            and spec.is_moe_layer(spec.num_hidden_layers - 1)
        ):
            # each MTP module's FFN is an MoE layer (mtp_ops): it pays the MoE layer cost too
            over = Work(overhead_s=moe_layer_overhead(ctx.r, ctx.shard.tokens))
            over = over.scaled(spec.mtp_layers)
            fwd, bwd = fwd + over, bwd + over
        wgt = wgt + _pass_work(ends, Pass.backward_weight, ctx.r, 1)
        detail += _op_times(ends, ctx.r, 1)
    dense, experts = _stage_params(
        spec, layout, stage, params, routed, schedule=run.schedule, mtp=run.memory.mtp
    )
    return StageWork(stage, len(layers), fwd, bwd, wgt, rec, dense, experts), detail


def _op_times(ops: Iterable[Op], r: Rates, count: int) -> list[OpTime]:
    out = []
    for op in ops:
        t = op_time_s(op, r)
        out.append(
            OpTime(op, t, op.kind is not OpKind.memory and t > op.bytes / r.hbm_bytes_per_s, count)
        )
    return out


def _stage_params(
    spec: ModelSpec, layout: ParallelLayout, stage: int, params: int, routed: int, *,
    schedule: Schedule, mtp: bool,
) -> tuple[int, int]:  # fmt: skip
    """(dense, routed-expert) parameters one rank of ``stage`` holds, from its layers' ``params``
    of which ``routed`` are routed experts: dense split over TP, experts over EP·ETP; the
    embedding and the config's declared parts (a learned position table, a vision tower) on
    the first stage; on the last, the final norm and head and what it holds beyond them
    (``last_stage_extra_params``: the MTP modules when they run, the embedding's copy), as
    ``layout.memory.pp_rank_params`` counts them: their gradients are reduced and their Adam
    step taken with the stage's own."""
    dense = params - routed
    if stage == 0:
        dense += embedding_params(spec) + declared_params(spec)
    if stage == layout.pp - 1:
        extra_dense, extra_routed = last_stage_extra_params(spec, layout.pp, schedule, mtp=mtp)
        dense += lm_head_params(spec) + final_norm_params(spec) + extra_dense
        routed += extra_routed
    return dense // layout.tp, routed // (layout.ep * layout.etp)


# ---- data parallel tail and optimizer ----


def _dp_exposed(
    ctx: _Ctx, st: StageWork, zero: ZeroStage, vpp: int, m: int
) -> tuple[float, float, float]:
    """(exposed seconds, total seconds, the part of the total on groups that cross nodes) of the
    stage's gradient reduction and parameter gather over its data-parallel groups (module
    docstring).

    A bucket's reduce-scatter starts once its gradients are final, in the backward of the last
    micro-batch; under pipeline parallelism those backwards spread over the drain, (p−1)/v more
    micro-batch times, and the parameter gathers over the fill likewise (Narayanan et al. 2021
    §2.2: the flush; Megatron DDP launches each chunk's buckets as its gradients finish).
    ZeRO-2 and ZeRO-3 repeat their collectives for each of the ``m`` micro-batches, each under
    its own micro-batch's pass (module docstring)."""
    r, ov, lay = ctx.r, ctx.opts.overlap, ctx.layout
    sms = r.comm_sm_share
    drain = 1 + (lay.pp - 1) / vpp
    grad_bytes = ctx.opts.grad_reduce_dtype.bytes * ctx.opts.comm_scale
    param_bytes = ctx.shard.dtype.bytes * ctx.opts.comm_scale
    distributed = zero >= ZeroStage.optimizer
    exposed = total = network = 0.0
    links = ctx.links
    for params, group in ((st.dense_params, links["dp"]), (st.expert_params, links["edp"])):
        size, nodes = group.size, group.nodes
        if params == 0 or size == 1:
            continue
        before = total
        bucket = min(params, max(DDP_BUCKET_MIN_PARAMS, DDP_BUCKET_PARAMS_PER_DP_RANK * lay.dp))
        buckets = math.ceil(params / bucket)
        if distributed:
            one = collective_time_s(r, Collective.reduce_scatter, bucket * grad_bytes, size, nodes)
            gather = collective_time_s(r, Collective.all_gather, bucket * param_bytes, size, nodes)
        else:
            one = collective_time_s(r, Collective.all_reduce, bucket * grad_bytes, size, nodes)
            gather = 0.0
        reduce_s, gather_s = buckets * one, buckets * gather
        bwd = st.backward_input.total_s + st.backward_weight.total_s + st.recompute.total_s
        fwd = st.forward.total_s
        if zero >= ZeroStage.parameters:  # gathers before every forward and every backward
            exposed += exposed_s(m * gather_s, m * fwd, ov.dp_param_gather, gather, sm_share=sms)
            exposed += exposed_s(
                m * (reduce_s + gather_s), m * bwd, ov.dp_grad_reduce, one, sm_share=sms
            )
            total += m * (reduce_s + 2 * gather_s)
        elif zero >= ZeroStage.gradients:  # a reduce-scatter after every backward
            exposed += exposed_s(m * reduce_s, m * bwd, ov.dp_grad_reduce, one, sm_share=sms)
            exposed += exposed_s(gather_s, fwd * drain, ov.dp_param_gather, gather, sm_share=sms)
            total += m * reduce_s + gather_s
        else:
            exposed += exposed_s(reduce_s, bwd * drain, ov.dp_grad_reduce, one, sm_share=sms)
            exposed += exposed_s(gather_s, fwd * drain, ov.dp_param_gather, gather, sm_share=sms)
            total += reduce_s + gather_s
        if group.link is Link.inter_node:
            network += total - before
    return exposed, total, network


def _optimizer_s(ctx: _Ctx, st: StageWork, zero: ZeroStage) -> float:
    """Adam over the rank's optimizer shard, memory-bound (ADAM_BYTES_PER_PARAM)."""
    lay = ctx.layout
    dense_shard = lay.grad_group if zero >= ZeroStage.optimizer else 1
    expert_shard = ctx.links["edp"].size if zero >= ZeroStage.optimizer else 1
    params = st.dense_params / dense_shard + st.expert_params / max(1, expert_shard)
    return params * ADAM_BYTES_PER_PARAM / ctx.r.hbm_bytes_per_s


# ---- the step ----


def model_flop_per_token(spec: ModelSpec, seq: int, causal: bool) -> float:
    """Model FLOP per token, forward + backward, no recompute (PaLM App. B): 6 per active
    matmul parameter plus the attention scores, 3 × the forward's 2·2·s·(d_qk + d_v)/2 per
    head and layer, halved under a causal mask (``--causal``)."""
    return _model_flop_per_token(spec, seq, causal)


@cache
def _model_flop_per_token(spec: ModelSpec, seq: int, causal: bool) -> float:
    from tpcalc.calc.layout.compute import FLOP_PER_PARAM_TOKEN, active_matmul_params
    from tpcalc.calc.time.ops import CAUSAL_SHARE, GEMM_FLOP_PER_MAC

    mask = CAUSAL_SHARE if causal else 1.0
    if spec.is_mla:
        d_qk = (spec.qk_nope_head_dim or 0) + (spec.qk_rope_head_dim or 0)
        d_v = spec.v_head_dim or 0
    else:
        d_qk = d_v = spec.head_dim_resolved
    fwd_attn = GEMM_FLOP_PER_MAC * seq * (d_qk + d_v) * spec.num_attention_heads * mask
    attn = 3 * fwd_attn * spec.full_attention_layers  # forward + backward = 3 × forward
    return FLOP_PER_PARAM_TOKEN * active_matmul_params(spec) + attn


def ep_overlap_problem(
    spec: ModelSpec, layout: ParallelLayout, run: LayoutRun, opts: TimeOptions
) -> str | None:
    """Why Megatron-Core refuses the EP all-to-all overlap on this run (``ep.overlap``), or
    None. DualPipe overlaps by its own schedule (DeepSeek-V3 §3.2.1), outside these rules."""
    if run.schedule is Schedule.dualpipe:
        return None
    return a2a_overlap_problem(
        pp=layout.pp, vpp=run.vpp, ep=layout.ep, full_recompute=run.recompute is Recompute.full,
        recompute_modules=run.memory.recompute_modules, recompute_layers=opts.recompute_layers,
        dispatcher=run.memory.moe_dispatcher, mtp_layers=spec.mtp_layers if run.memory.mtp else 0,
    )  # fmt: skip


def ep_overlap_on(
    spec: ModelSpec, layout: ParallelLayout, run: LayoutRun, opts: TimeOptions
) -> bool:
    """Whether the EP all-to-all runs under compute: ``Overlap.ep_a2a`` where Megatron-Core
    allows it (``ep_overlap_problem``); unset, on with the DualPipe schedule only."""
    asked = opts.overlap.ep_a2a
    if asked is None:
        return run.schedule is Schedule.dualpipe
    return asked and ep_overlap_problem(spec, layout, run, opts) is None


def effective_options(
    spec: ModelSpec, layout: ParallelLayout, run: LayoutRun, opts: TimeOptions
) -> TimeOptions:
    """``opts`` with the EP overlap this run really gets (``ep_overlap_on``), so a report or a
    reproduction command of the run says what was priced."""
    if opts.overlap.ep_a2a and not ep_overlap_on(spec, layout, run, opts):
        return replace(opts, overlap=replace(opts.overlap, ep_a2a=False))
    return opts


def scores_of(spec: ModelSpec, tech: MemoryTechniques) -> dict[str, bool]:
    """The ``Shard`` fields of the run's attention kernel: the scores materialised unless the
    kernel is flash (``choices.AttentionKernel``), and then dropout on its probabilities when
    the run trains with dropout (``model_dropout``; a flash kernel applies it in-kernel), and
    the hidden dropout whatever the kernel."""
    eager = tech.attention != AttentionKernel.flash.value
    dropout = model_dropout(spec, tech.dropout)
    return {
        "materialised_scores": eager,
        "attention_dropout": eager and dropout,
        "hidden_dropout": dropout,
    }


def _context(spec: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, run: LayoutRun,
             opts: TimeOptions) -> _Ctx:  # fmt: skip
    """The rates, the micro-batch's shard and the groups every op and collective is timed on."""
    shard = Shard(
        seq=run.seq, micro_batch=run.micro_batch, tp=layout.tp, cp=layout.cp, ep=layout.ep,
        etp=layout.etp, sp=run.sp and layout.tp > 1, dtype=Dtype.bf16, gemm_dtype=run.dtype,
        causal=opts.causal, fused_sinks=opts.fused_sinks, **scores_of(spec, run.memory),
    )  # fmt: skip
    ep_overlap = ep_overlap_on(spec, layout, run, opts)
    r = rates(hw, run.dtype, efficiency_scale=opts.efficiency_scale)
    links = {
        **place_groups(layout), "edp": expert_dp_group(layout), "etp": expert_tp_group(layout)
    }  # fmt: skip
    return _Ctx(
        spec, layout, shard, r, opts, links, ep_overlap, run.microbatches,
        router_bytes=RouterDtype(run.memory.router_dtype).bytes,
    )  # fmt: skip


def _bubble_s(stages: tuple[StageWork, ...], run: LayoutRun, p: int) -> float:
    """The schedule's bubble over the mean stage F, B, W (``pipeline.bubble_time_s``)."""
    if p == 1:
        return 0.0
    times = [st.times for st in stages]
    mean = StageTimes(
        *(sum(getattr(t, f) for t in times) / p
          for f in ("forward_s", "backward_input_s", "backward_weight_s"))
    )  # fmt: skip
    return bubble_time_s(run.schedule, p, run.microbatches, mean, run.vpp)


def dualpipe_ranks(stages: tuple[StageWork, ...]) -> tuple[StageWork, ...]:
    """DualPipe's ranks from its p stages (DeepSeek-V3 report §3.2.1, Figure 5): micro-batches
    are fed from both ends, half from each (``DUALPIPE_DIRECTIONS``), so rank r runs stage r
    for one half and stage p−1−r for the other, and holds both stages' parameters
    (Table 2: 2× parameters). One micro-batch of rank r costs the mean of its two stages:
    the heavy last stage (LM head, loss, MTP) shares rank 0 and rank p−1 with the first."""
    p = len(stages)
    half = 1 / DUALPIPE_DIRECTIONS
    out = []
    for r, a in enumerate(stages):
        b = stages[p - 1 - r]
        out.append(
            StageWork(
                r,
                a.layers + b.layers,
                a.forward.scaled(half) + b.forward.scaled(half),
                a.backward_input.scaled(half) + b.backward_input.scaled(half),
                a.backward_weight.scaled(half) + b.backward_weight.scaled(half),
                a.recompute.scaled(half) + b.recompute.scaled(half),
                a.dense_params + b.dense_params,
                a.expert_params + b.expert_params,
            )  # fmt: skip
        )
    return tuple(out)


def _tail(
    ctx: _Ctx, stages: tuple[StageWork, ...], neck: StageWork, vpp: int,
    costs: list[tuple[float, float, float, float]] | None = None,
) -> tuple[float, float, float]:  # fmt: skip
    """(exposed DP, optimizer, total DP) seconds after the last backward. The stage that
    finishes last decides: in 1F1B stage s finishes its last backward s backward-steps before
    stage 0, so its tail starts that much earlier. ``costs``: each stage's ``_stage_tail``,
    when the caller has them."""
    step_back = neck.times.backward_input_s + neck.times.backward_weight_s
    best = (-1.0, 0.0, 0.0)
    for i, st in enumerate(stages):
        dp_exp, dp_total, opt, _ = costs[i] if costs is not None else _stage_tail(ctx, st, vpp)
        tail = max(0.0, dp_exp + opt - st.stage * step_back)
        if tail > best[0]:
            best = (tail, dp_exp, dp_total)
    tail, dp_exp, dp_total = best
    optimizer = max(0.0, tail - dp_exp)
    return tail - optimizer, optimizer, dp_total


def _stage_tail(ctx: _Ctx, st: StageWork, vpp: int) -> tuple[float, float, float, float]:
    """(exposed DP, total DP, optimizer, total DP across nodes) seconds of one stage
    (``_dp_exposed``, ``_optimizer_s``): they read the stage's work and parameters, not its
    index."""
    zero = ctx.layout.zero
    dp_exp, dp_total, dp_network = _dp_exposed(ctx, st, zero, vpp, ctx.microbatches)
    return dp_exp, dp_total, _optimizer_s(ctx, st, zero), dp_network


def step_time(
    spec: ModelSpec,
    hw: HardwareSpec,
    layout: ParallelLayout,
    run: LayoutRun,
    opts: TimeOptions | None = None,
) -> StepTime:
    """The step of ``layout`` running ``run`` on ``hw`` (module docstring):
    m · (F + B + W) of the slowest stage + bubble + exposed p2p + DP tail + optimizer."""
    opts = opts or TimeOptions()
    ctx = _context(spec, hw, layout, run, opts)
    padded = padded_vocab(spec.vocab_size, layout.tp, opts.vocab_pad_multiple)
    n = spec.num_hidden_layers
    split = rank_layers(n, layout.pp, run.vpp, split_of(opts, n, layout.pp, run.vpp))
    stages, details = zip(
        *(_stage_work(ctx, s, layers, run, padded) for s, layers in enumerate(split)),
        strict=True,
    )
    return _step_of_stages(ctx, run, stages, details)


def _step_of_stages(
    ctx: _Ctx, run: LayoutRun, stages: tuple[StageWork, ...], details: tuple[list[OpTime], ...],
    costs: list[tuple[float, float, float, float]] | None = None,
    bubble_s: float | None = None,
    hardware_flop: float | None = None,
    template_of: Sequence[int] | None = None,
) -> StepTime:  # fmt: skip
    """``step_time`` from its stages' work and details; ``costs`` (each stage's
    ``_stage_tail``), ``bubble_s`` (``_bubble_s``) and ``hardware_flop`` (``_hardware_flop``)
    when the caller has them (``time.bulk``); ``template_of``: each stage's index among the
    distinct ones it was built from (``time.bulk``: stages of one template have the same work
    and tail, so their totals and link loads are taken once), else every stage its own."""
    spec, layout, opts = ctx.spec, ctx.layout, ctx.opts
    m = run.microbatches
    if hardware_flop is None:
        hardware_flop = _hardware_flop(details)
    if bubble_s is None:
        bubble_s = _bubble_s(stages, run, layout.pp)
    dualpipe = run.schedule is Schedule.dualpipe and layout.pp > 1
    if dualpipe:
        # each rank runs two stages (``dualpipe_ranks``): its work and tail are the pair's
        stages, costs, template_of = dualpipe_ranks(stages), None, None
    of = range(len(stages)) if template_of is None else template_of
    first: dict[int, int] = {}  # each template's first stage
    for i, t in enumerate(of):
        first.setdefault(t, i)
    totals = {t: stages[i].total_s for t, i in first.items()}
    neck = stages[max(range(len(stages)), key=lambda i: totals[of[i]])]
    pp_s, sends_total = _pp_exposed(ctx, m, run.vpp, run.schedule)
    sync_s = _embedding_sync_s(ctx, run)
    pp_s, pp_total = pp_s + sync_s, sends_total + sync_s
    ends = (0, len(stages) - 1)  # the ranks of the embedding group
    if costs is None:
        costs = [_stage_tail(ctx, st, run.vpp) for st in stages]
    dp_s, opt_s, dp_total = _tail(ctx, stages, neck, run.vpp, costs)
    work, rec = neck.work.scaled(m), neck.recompute.scaled(m)
    parts = {
        "gemm_time_s": work.gemm_s, "attention_time_s": work.attention_s,
        "memory_bound_time_s": work.memory_s,
        "moe_overhead_time_s": work.overhead_s + rec.overhead_s,
        "recompute_time_s": rec.gemm_s + rec.attention_s + rec.memory_s,
        "tp_exposed_time_s": work.tp_s + rec.tp_s, "cp_exposed_time_s": work.cp_s + rec.cp_s,
        "ep_exposed_time_s": work.ep_s + rec.ep_s,
        "bubble_time_s": bubble_s,
        "pp_exposed_time_s": pp_s, "dp_exposed_time_s": dp_s, "optimizer_time_s": opt_s,
    }  # fmt: skip
    busiest = max(
        _busiest_link_s(
            ctx,
            stages[i].work.scaled(m) + stages[i].recompute.scaled(m),
            pp_total if i in ends else sends_total,
            costs[i],
        )
        for i in first.values()
    )
    parts["link_contention_time_s"] = max(0.0, busiest - sum(parts.values()))
    step_s = sum(parts.values())
    tokens = run.seq * run.micro_batch * m * layout.dp
    gpu_s = step_s * layout.world
    model_flop = model_flop_per_token(spec, run.seq, opts.causal_model_flops) * tokens
    r = ctx.r
    peak = r.peak_flop_per_s(run.dtype)
    hw_flop = hardware_flop * m * layout.dp * layout.cp * layout.tp
    return StepTime(
        **parts,
        step_time_s=step_s,
        tokens_per_step=tokens,
        tokens_per_s_per_gpu=tokens / gpu_s,
        model_flop_per_step=model_flop,
        model_flop_per_s_per_gpu=model_flop / gpu_s,
        mfu_ratio=model_flop / gpu_s / peak,
        hardware_flop_per_step=hw_flop,
        hfu_ratio=hw_flop / gpu_s / peak,
        tp_comm_time_s=work.tp_comm_s + rec.tp_comm_s,
        cp_comm_time_s=work.cp_comm_s + rec.cp_comm_s,
        ep_comm_time_s=work.ep_comm_s + work.etp_comm_s + rec.ep_comm_s + rec.etp_comm_s,
        pp_comm_time_s=pp_total,
        dp_comm_time_s=dp_total,
        bottleneck_stage=neck.stage,
        stage_forward_time_s=neck.times.forward_s,
        stage_backward_input_time_s=neck.times.backward_input_s,
        stage_backward_weight_time_s=neck.times.backward_weight_s,
        stages=tuple(stages),
        bottleneck_ops=tuple(details[neck.stage]),
        paired_ops=tuple(details[layout.pp - 1 - neck.stage]) if dualpipe else (),
    )


def _busiest_link_s(
    ctx: _Ctx, work: Work, pp_s: float, tail: tuple[float, float, float, float]
) -> float:
    """Seconds the busier link class of one pipeline rank carries traffic in a step: each
    collective's time at the bandwidth it would get alone, summed over the collectives sharing
    the link (the rank's NIC for groups that cross nodes, its NVLink otherwise). ``work``: the
    stage's m micro-batches (with any recompute), ``pp_s`` its pipeline sends, ``tail`` its
    ``_stage_tail``. However well the collectives hide under compute, the step is at least
    this long (module docstring: link contention)."""
    _, dp_total, _, dp_network = tail
    busy = dict.fromkeys(Link, 0.0)
    for dim, seconds in (
        ("tp", work.tp_comm_s),
        ("cp", work.cp_comm_s),
        ("ep", work.ep_comm_s),
        ("etp", work.etp_comm_s),
        ("pp", pp_s),
    ):
        busy[ctx.links[dim].link] += seconds
    busy[Link.inter_node] += dp_network
    busy[Link.intra_node] += dp_total - dp_network
    return max(busy.values())


def _hardware_flop(details: tuple[list[OpTime], ...]) -> float:
    """FLOP every stage's kernels execute per micro-batch (attention backward at 2.5×;
    recomputation is not counted)."""
    return sum(ot.op.flop * ot.count for d in details for ot in d)


def scatter_gather(opts: TimeOptions, sp: bool, tp: int) -> bool:
    """Whether pipeline sends are scattered over the TP ranks (``pp_scatter_gather``): only
    without SP (with it the activation between stages is already split s/t) and at t > 1."""
    return opts.pp_scatter_gather and not sp and tp > 1


def _pp_exposed(ctx: _Ctx, m: int, v: int, schedule: Schedule) -> tuple[float, float]:
    """(exposed, total) seconds of pipeline sends: when sends run beside compute, the ones the
    schedule's order leaves on the critical path (``schedule.exposed_sends``: the fill and
    drain, and 1F1B's steady state), else every send of every micro-batch and chunk."""
    p = ctx.layout.pp
    if p == 1:
        return 0.0, 0.0
    msg = ctx.shard.sp_tokens * ctx.spec.hidden_size * ctx.shard.dtype.bytes * ctx.opts.comm_scale
    nodes = min(2, ctx.links["pp"].nodes)
    tp = ctx.layout.tp
    if scatter_gather(ctx.opts, ctx.shard.sp, tp):
        gather = collective_time_s(ctx.r, Collective.all_gather, msg, tp, ctx.links["tp"].nodes)
        one = collective_time_s(ctx.r, Collective.p2p, msg / tp, 2, nodes) + gather
    else:
        one = collective_time_s(ctx.r, Collective.p2p, msg, 2, nodes)
    every = pp_send_count(schedule, p, m, v, overlap=False)
    return pp_send_count(schedule, p, m, v, overlap=ctx.opts.overlap.pp_p2p) * one, every * one


def _embedding_sync_s(ctx: _Ctx, run: LayoutRun) -> float:
    """``embedding_sync_s`` of this step's layout and run."""
    lay = ctx.layout
    return embedding_sync_s(
        ctx.spec, ctx.r, ctx.opts, tp=lay.tp, pp=lay.pp, schedule=run.schedule,
        mtp=run.memory.mtp, pp_nodes=ctx.links["pp"].nodes,
    )  # fmt: skip


def embedding_sync_s(
    spec: ModelSpec, r: Rates, opts: TimeOptions, *, tp: int, pp: int, schedule: Schedule,
    mtp: bool, pp_nodes: int,
) -> float:  # fmt: skip
    """Seconds of the embedding group's gradient all-reduce (``params.counts``'
    ``SRC_EMBEDDING_SYNC``): where the last stage holds its own copy of the embedding
    (``last_stage_embedding_copy``), it and the first stage all-reduce their V/t × h gradients,
    synchronously, after the data-parallel reduction and before the optimizer: exposed whole.
    The two ranks are the pipeline's ends, on two nodes when the pipeline group spans nodes
    (``pp_nodes``). The planner's bounds add the same seconds (``plan.bounds``)."""
    copy = last_stage_embedding_copy(spec, pp, schedule, mtp=mtp)
    if not copy:
        return 0.0
    grad = copy // tp * opts.grad_reduce_dtype.bytes * opts.comm_scale
    ends = EMBEDDING_GROUP_RANKS
    return collective_time_s(r, Collective.all_reduce, grad, ends, min(ends, pp_nodes))


class MicroBatchCompute(Struct, frozen=True):
    """The compute of one micro-batch through the whole model on one TP rank (no pipeline, no
    communication): what ``comm``, ``flops`` and ``dp`` compare their traffic against."""

    forward_s: float
    backward_s: float  # input and weight gradients, with any recomputation

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_s


def _compute_only(w: Work) -> float:
    return w.gemm_s + w.attention_s + w.memory_s + w.overhead_s


def micro_batch_compute(
    spec: ModelSpec,
    hw: HardwareSpec,
    *,
    tp: int,
    seq: int,
    micro_batch: int,
    sp: bool = True,
    recompute: Recompute = Recompute.none,
    dtype: Dtype = Dtype.bf16,
) -> MicroBatchCompute:
    """Forward and backward compute seconds of one micro-batch on one TP rank, every op timed
    by the roofline (``step_time`` on a one-stage layout, its communication left out)."""
    layout = ParallelLayout(gpus_per_node=hw.gpus_per_node.value, tp=tp)
    run = LayoutRun(
        seq=seq, microbatches=1, micro_batch=micro_batch, sp=sp, recompute=recompute, dtype=dtype
    )
    (stage,) = step_time(spec, hw, layout, run).stages
    backward = stage.backward_input + stage.backward_weight + stage.recompute
    return MicroBatchCompute(_compute_only(stage.forward), _compute_only(backward))
