"""Time of one kernel: a roofline over achieved rates, and of one collective: bytes over the bus
bandwidth nccl-tests reports for its message size.

Roofline (Williams et al. 2009): time = max(FLOP / (peak · efficiency), bytes / (HBM bandwidth ·
efficiency)). A GEMM's efficiency falls as any of its dimensions shrinks (small or skinny GEMMs
reuse each tile less): eff(K) = eff_max · K / (K + K½) over the reduction dimension, eff_max
from the best large shape of a public sweep (ml-engineering MAMF) and K½ from a sweep over K
(tilelang); a skinny M or N (few tokens per expert) is memory-bound and the roofline's memory
term takes over (DeepGEMM's M = 64, 128 rows run at HBM speed). The fused
attention kernel runs at the FlashAttention papers' achieved fraction of peak, forward and
backward apart.

Collectives: nccl-tests defines bus bandwidth so that a ring collective's time is the bytes each
rank sends over it divided by busbw (NVIDIA nccl-tests doc/PERFORMANCE.md: busbw = algbw ·
2(n−1)/n for all-reduce, (n−1)/n for all-gather, reduce-scatter and all-to-all). The α-β model
adds NCCL's latency: a base cost per call plus α per ring step, α_intra inside a node and
α_inter on steps that cross nodes (NCCL src/graph/tuning.cc; ``links.ring_steps``). With the
H100 values it reproduces the measured busbw-versus-size curve's half-bandwidth point (~20 MiB
for an 8-GPU all-reduce, docs/kernel-measurements.md §3.2).
"""

from __future__ import annotations

from math import comb

from msgspec import Struct

from tpcalc.calc.links.collectives import Collective, ring_factor
from tpcalc.calc.links.link import ring_steps
from tpcalc.calc.time.ops import Op, OpKind, Pass
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec
from tpcalc.specs.performance import PerformanceSpec
from tpcalc.units import Dtype


class Rates(Struct, frozen=True):
    """The achieved rates one rank computes and communicates at (from its card's config)."""

    bf16_peak_flop_per_s: float
    fp8_peak_flop_per_s: float
    gemm_efficiency: float
    gemm_half_k: float
    gemm_fp8_efficiency: float
    gemm_fp8_half_k: float
    attention_fwd_efficiency: float
    attention_fwd_half_seq: float
    attention_bwd_efficiency: float
    attention_bwd_half_seq: float
    attention_fwd_noncausal_efficiency: float
    attention_fwd_noncausal_half_seq: float
    attention_bwd_noncausal_efficiency: float
    attention_bwd_noncausal_half_seq: float
    attention_half_head_dim: float
    hbm_bytes_per_s: float
    compute_scale: float
    moe_layer_overhead_s: float
    # the most tokens per rank (s·b/cp) of a micro-batch the MoE constant was fitted on; 0:
    # no range recorded (``moe_layer_overhead``)
    moe_fit_tokens_high: int
    intra_busbw_bytes_per_s: float
    inter_busbw_bytes_per_s: float
    collective_base_latency_s: float
    intra_step_latency_s: float
    inter_step_latency_s: float
    comm_sm_share: float  # SMs an overlapped collective's kernels hold / the card's SMs

    def peak_flop_per_s(self, dtype: Dtype) -> float:
        """The card's dense peak in ``dtype``, FP8's for fp8 and BF16's otherwise: what MFU is
        taken against."""
        return self.fp8_peak_flop_per_s if dtype is Dtype.fp8 else self.bf16_peak_flop_per_s


def performance(hw: HardwareSpec) -> PerformanceSpec:
    """The card's ``performance`` block, or an error saying the step-time model needs one."""
    if hw.performance is None:
        raise InputError(
            f"{hw.name} has no 'performance' block in its config, so the per-operation step-time "
            "model cannot time it; add one (see configs/hardware/h100-sxm.yaml) or use "
            "--time-model fixed"
        )
    return hw.performance


def rates(hw: HardwareSpec, dtype: Dtype, *, efficiency_scale: float = 1.0) -> Rates:
    """Rates of ``hw``. FP8 GEMMs (ops marked ``fp8``) run at the FP8 peak and efficiency; the
    attention core, BF16 GEMMs and memory-bound kernels at the BF16 ones, as Transformer
    Engine's FP8 recipes run them."""
    perf = performance(hw)
    fp8_peak = hw.peak_fp8_flop_per_s.value if hw.peak_fp8_flop_per_s else 0.0
    if dtype is Dtype.fp8 and not fp8_peak:
        raise InputError(f"--dtype fp8: {hw.name} has no peak_fp8_flop_per_s; use --dtype bf16")
    return Rates(
        bf16_peak_flop_per_s=hw.peak_bf16_flop_per_s.value,
        fp8_peak_flop_per_s=fp8_peak,
        gemm_efficiency=perf.gemm_efficiency.value,
        gemm_half_k=perf.gemm_half_k.value,
        gemm_fp8_efficiency=perf.gemm_fp8_efficiency.value,
        gemm_fp8_half_k=perf.gemm_fp8_half_k.value,
        attention_fwd_efficiency=perf.attention_fwd_efficiency.value,
        attention_fwd_half_seq=perf.attention_fwd_half_seq.value,
        attention_bwd_efficiency=perf.attention_bwd_efficiency.value,
        attention_bwd_half_seq=perf.attention_bwd_half_seq.value,
        attention_fwd_noncausal_efficiency=perf.attention_fwd_noncausal_efficiency.value,
        attention_fwd_noncausal_half_seq=perf.attention_fwd_noncausal_half_seq.value,
        attention_bwd_noncausal_efficiency=perf.attention_bwd_noncausal_efficiency.value,
        attention_bwd_noncausal_half_seq=perf.attention_bwd_noncausal_half_seq.value,
        attention_half_head_dim=perf.attention_half_head_dim.value,
        hbm_bytes_per_s=perf.hbm_bandwidth_bytes_per_s.value * perf.hbm_efficiency.value,
        compute_scale=perf.fitted.compute_scale.value * efficiency_scale,
        moe_layer_overhead_s=(
            perf.fitted.moe_layer_overhead_s.value if perf.fitted.moe_layer_overhead_s else 0.0
        ),
        moe_fit_tokens_high=(perf.fitted.moe_fit_tokens.high if perf.fitted.moe_fit_tokens else 0),
        intra_busbw_bytes_per_s=perf.intra_node_busbw_bytes_per_s.value,
        inter_busbw_bytes_per_s=perf.inter_node_busbw_bytes_per_s.value,
        collective_base_latency_s=perf.collective_base_latency_s.value,
        intra_step_latency_s=hw.intra_node_latency_s.value,
        inter_step_latency_s=hw.inter_node_latency_s.value,
        comm_sm_share=comm_sm_share(perf),
    )


def moe_layer_overhead(r: Rates, tokens: int) -> float:
    """The card's fitted MoE constant for one MoE layer and pass of a micro-batch of ``tokens``
    per rank (s·b/cp): the constant c as fitted up to the most tokens of the runs it was fitted
    on (T_fit, ``fitted.moe_fit_tokens.high``), and beyond them c · T / T_fit, so that a
    larger micro-batch never pays less of it per token than the largest fitted run did. A per
    pass constant past T_fit would shrink per token without limit, and the planner would take
    ever larger micro-batches for it alone; what it stands for is not a per-pass cost alone
    (docs/kernel-measurements.md §6: GPT-OSS-120B's missing time scales with all of its work,
    +54-65% of the step on every card). Below the fitted runs it stays c per pass."""
    c, fit = r.moe_layer_overhead_s, r.moe_fit_tokens_high
    return c * tokens / fit if fit and tokens > fit else c


def comm_sm_share(perf: PerformanceSpec) -> float:
    """The share of a card's SMs an overlapped collective's kernels hold while it runs:
    comm_kernel_sms / sm_count (``step.exposed_s``)."""
    return perf.comm_kernel_sms.value / perf.sm_count.value


def gemm_efficiency(r: Rates, k: int, fp8: bool = False) -> float:
    """eff_max · K/(K + K½) (module docstring), times the fitted compute scale."""
    if fp8:
        eff, half = r.gemm_fp8_efficiency, r.gemm_fp8_half_k
    else:
        eff, half = r.gemm_efficiency, r.gemm_half_k
    return eff * k / (k + half) * r.compute_scale


MEASURED_HEAD_DIM = 128  # the head dim the attention efficiencies were measured at


def attention_efficiency(
    r: Rates, phase: Pass, block: int, head_dim: int, causal: bool = True
) -> float:
    """eff_max · S/(S + S½) of the fused attention kernel on blocks of ``block`` queries, with
    the causal or the unmasked kernel's curve, times d/(d + d½) relative to the measured head
    dim (FlashAttention-3 Figure 5: 497, 648, 756 TFLOP/s at d = 64, 128, 256)."""
    if phase is Pass.forward and causal:
        eff, half = r.attention_fwd_efficiency, r.attention_fwd_half_seq
    elif phase is Pass.forward:
        eff, half = r.attention_fwd_noncausal_efficiency, r.attention_fwd_noncausal_half_seq
    elif causal:
        eff, half = r.attention_bwd_efficiency, r.attention_bwd_half_seq
    else:
        eff, half = r.attention_bwd_noncausal_efficiency, r.attention_bwd_noncausal_half_seq
    h = r.attention_half_head_dim
    width = head_dim / (head_dim + h) * (MEASURED_HEAD_DIM + h) / MEASURED_HEAD_DIM
    return min(1.0, eff * width) * block / (block + half) * r.compute_scale


def op_time_s(op: Op, r: Rates) -> float:
    """Roofline time of one op: the slower of its compute and its memory traffic."""
    memory = op.bytes / r.hbm_bytes_per_s
    if op.kind is OpKind.memory:
        return memory
    if op.kind is OpKind.gemm:
        peak = r.fp8_peak_flop_per_s if op.fp8 else r.bf16_peak_flop_per_s
        rate = peak * gemm_efficiency(r, op.k, op.fp8)
    else:
        rate = r.bf16_peak_flop_per_s * attention_efficiency(r, op.phase, op.m, op.k, op.causal)
    return max(op.flop / rate, memory)


def group_busbw_bytes_per_s(r: Rates, group: int, nodes: int) -> float:
    """Bus bandwidth of a ring collective over ``group`` ranks on ``nodes`` nodes.

    Inside one node, NVLink's. Across nodes NCCL runs one ring per NIC, so the k = group/nodes
    members of a node push the node's share through k NICs at once: k · the per-NIC rate, never
    more than NVLink's (NCCL multi-channel rings; the 4-node 8x B200 all-reduce at 382 GB/s
    against 50 GB/s NICs, docs/kernel-measurements.md §3.3)."""
    if nodes <= 1:
        return r.intra_busbw_bytes_per_s
    per_node = max(1, group // nodes)
    return min(r.intra_busbw_bytes_per_s, per_node * r.inter_busbw_bytes_per_s)


def collective_time_s(
    r: Rates, collective: Collective, message_bytes: float, group: int, nodes: int
) -> float:
    """base + ring steps · α + bytes each rank sends / bus bandwidth, for a group of ``group``
    ranks over ``nodes`` nodes (module docstring). An all-to-all sends the share bound for
    other nodes through the rank's own NIC while the rest moves over NVLink."""
    sent = ring_factor(collective, group) * message_bytes
    if sent <= 0:
        return 0.0
    steps = ring_steps(collective, group, nodes)
    latency = (
        r.collective_base_latency_s
        + steps.intra * r.intra_step_latency_s
        + steps.inter * r.inter_step_latency_s
    )
    if collective is Collective.all_to_all and nodes > 1:
        per_node = max(1, group // nodes)
        off_node = message_bytes * (group - per_node) / group
        on_node = message_bytes * (per_node - 1) / group
        return latency + max(
            off_node / r.inter_busbw_bytes_per_s, on_node / r.intra_busbw_bytes_per_s
        )
    return latency + sent / group_busbw_bytes_per_s(r, group, nodes)


def expected_remote_nodes(topk: int, experts: int, nodes: int) -> float:
    """Distinct other nodes one token's ``topk`` experts sit on, experts spread evenly over
    ``nodes`` nodes and chosen uniformly without replacement (balanced routing; Megatron-Core
    moe_router_force_load_balancing draws random router scores): (N − 1)·(1 − C(E − E/N, k) /
    C(E, k)), the chance a given other node holds none of the k being the hypergeometric zero.
    Node-limited routing (DeepSeek-V3 report §2.1.2: a token reaches at most M = 4 nodes;
    Megatron's moe_router_group_topk) can only lower it; it is not modelled."""
    if nodes <= 1:
        return 0.0
    per_node = experts // nodes
    k = min(topk, experts)
    none = comb(experts - per_node, k) / comb(experts, k)
    return (nodes - 1) * (1.0 - none)


def dispatch_time_s(
    r: Rates,
    tokens: int,
    topk: int,
    experts: int,
    token_bytes: float,
    group: int,
    nodes: int,
    *,
    node_dedup: bool,
) -> float:
    """One MoE dispatch (or combine) of ``tokens`` tokens, ``topk`` copies each, over an EP
    group of ``group`` ranks on ``nodes`` nodes.

    NCCL's all-to-all (Megatron-Core alltoall dispatcher) sends every copy: the k copies of a
    token bound for other nodes cross the network k·(N−1)/N times on average. A node-aware
    dispatcher (DeepEP normal kernels, HybridEP; DeepSeek-V3 report §3.2.1) sends a token
    over the network once per distinct remote node, to the GPU of the same local index, which
    forwards it over NVLink to the experts' ranks (the combine reduces on that node first and
    returns once): network bytes = tokens · ``expected_remote_nodes`` · token bytes, NVLink
    bytes = every copy bound for another rank, the slower of the two legs."""
    copies = tokens * topk * token_bytes
    if not node_dedup or nodes <= 1:
        return collective_time_s(r, Collective.all_to_all, copies, group, nodes)
    steps = ring_steps(Collective.all_to_all, group, nodes)
    latency = (
        r.collective_base_latency_s
        + steps.intra * r.intra_step_latency_s
        + steps.inter * r.inter_step_latency_s
    )
    network = tokens * token_bytes * expected_remote_nodes(topk, experts, nodes)
    nvlink = copies * (group - 1) / group
    return latency + max(network / r.inter_busbw_bytes_per_s, nvlink / r.intra_busbw_bytes_per_s)


def expert_tp_time_s(
    r: Rates, copies: int, token_bytes: float, probs_token_bytes: float, etp: int, nodes: int
) -> float:
    """One pass of an MoE layer's expert-tensor-parallel collectives, over a group of ``etp``
    ranks on ``nodes`` nodes: 0 at etp = 1.

    Megatron-Core's all-to-all dispatcher with --expert-tensor-parallel-size > 1 all-gathers the
    token copies the all-to-all brought (``copies``, the rank's T/t·k under balanced routing)
    over the etp ranks that split each expert, before the experts
    (``gather_from_sequence_parallel_region``), and reduce-scatters the experts' outputs back
    before the combine, in the routing probabilities' dtype (``probs_token_bytes`` per token:
    ``reduce_scatter_to_sequence_parallel_region(hidden_states.to(probs.dtype))``;
    megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher
    ``dispatch_postprocess`` and ``combine_preprocess``). The backward runs their adjoints, a
    reduce-scatter and an all-gather of the same shapes, so every pass runs one collective of
    each size: etp·copies tokens gathered, (etp − 1)/etp of them sent by each rank. The flex
    (DeepEP) dispatcher sends each copy to the etp ranks of its expert itself, over the etp·ep
    group (``MoEFlexTokenDispatcher``: top-k × etp copies): the same tokens arrive, priced the
    same way."""
    if etp == 1:
        return 0.0
    gathered = etp * copies
    return collective_time_s(
        r, Collective.all_gather, gathered * token_bytes, etp, nodes
    ) + collective_time_s(r, Collective.reduce_scatter, gathered * probs_token_bytes, etp, nodes)
