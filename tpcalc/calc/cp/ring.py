"""Context parallelism: ring attention K/V traffic, causal load balance, Ulysses' head limit.

A sequence of s tokens is split over ``cp`` ranks; each rank keeps s/cp tokens of every
activation. Attention needs every K and V, so the K/V blocks travel around a ring: at each of
cp-1 steps a rank sends the block it holds to its neighbour while it computes attention of its
queries against the block it received (Liu et al. 2023, "Ring Attention with Blockwise
Transformers", arXiv 2310.01889, §3; seed 000 summary: "让 K、V 块沿环传一圈").

Only layers with softmax attention over the whole sequence need the ring. In a hybrid model
(Qwen3.8: 16 full-attention layers of 64) the linear-attention layers pass no K/V, so tpcalc
counts ``spec.full_attention_layers`` and says so (what those layers send under CP instead, two
all-to-alls to the heads and back, is ``tpcalc.calc.cp.linear``'s). Block sizes, the FLOP of one
ring step and Ulysses' head limit are in ``tpcalc.calc.cp.shapes``; ``cp_ring`` returns a
``CpRing``, and ``tpcalc.calc.cp.ring_explain`` holds its explanations and the row ``tpcalc cp``
prints.
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.calc.cp.shapes import (
    block_pair_flop,
    kv_block_bytes,
    kv_dims,
    q_heads_per_rank,
    ulysses_fits,
)
from tpcalc.calc.links.collectives import Collective
from tpcalc.calc.links.link import (
    LatencySteps,
    Link,
    bandwidth_bytes_per_s,
    link_nodes,
    ring_steps,
    steps_time_s,
)
from tpcalc.errors import InputError, divide
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.units import Dtype

RING_BWD = (
    "Liu et al. 2023 Ring Attention §3 (backward circulates K,V and dK,dV); Megatron-Core CP via "
    "TransformerEngine AttnFuncWithCPAndKVP2P.backward: cp steps, the first sends K,V only, the "
    "last dK,dV only, the others both: K,V and dK,dV cp-1 times each"
)


KV_PASSES = 2  # K,V circulate in the forward and again in the backward (``RING_BWD``)


def ring_sends_per_layer(cp: int) -> int:
    """Sends of one rank per ring layer, fwd + bwd: cp−1 K,V blocks forward, cp−1 backward and
    cp−1 dK,dV blocks: 3(cp − 1), none for cp = 1 (``RING_BWD``)."""
    return (KV_PASSES + 1) * (cp - 1)


def ring_latency_steps_per_layer(cp: int, nodes: int) -> LatencySteps:
    """Latency steps of one ring layer, counted as NCCL counts rings (``links.ring_steps``): each
    K,V pass is an all-gather (cp−1 steps), dK,dV a reduce-scatter (cp−1):
    ``ring_sends_per_layer`` steps in all, the node-crossing ones at α_inter."""
    return ring_steps(Collective.all_gather, cp, nodes, KV_PASSES) + ring_steps(
        Collective.reduce_scatter, cp, nodes
    )


# ---------------------------------------------------------------- the ring, typed
class CpRing(Struct, frozen=True):
    """Ring-attention traffic of one rank per micro-batch (forward + backward), its time, and the
    per-step overlap check. Bytes are what the rank sends; counted on the full-attention layers.
    """

    tokens_per_rank: int
    n_kv: int  # KV heads per rank of the ring (its TP share)
    d_k: int
    d_v: int
    q_heads: int
    kv_block_bytes: int
    grad_block_bytes: int
    ring_steps: int
    full_attention_layers: int
    fwd_kv_bytes_per_layer: int
    bwd_kv_bytes_per_layer: int
    bwd_dkv_bytes_per_layer: int
    ring_sends_per_layer_count: int
    send_bytes_per_layer: int
    fwd_send_bytes_per_micro_batch: int
    bwd_send_bytes_per_micro_batch: int
    send_bytes_per_micro_batch: int
    nodes: int
    bandwidth_bytes_per_s: float
    hop: LatencySteps  # one K,V block to the next rank
    ring_latency: LatencySteps  # every send of the micro-batch
    comm_time_s: float
    kv_step_time_s: float
    block_pair_flop: int
    achieved_flop_per_s: float
    attn_step_time_s: float
    kv_over_compute_ratio: float
    ulysses_max_cp: int  # KV heads per TP rank: the largest head split without replication
    ulysses_fits: bool  # cp divides the query and the KV heads (Ulysses possible)


def cp_ring(
    spec: ModelSpec,
    hw: HardwareSpec,
    *,
    seq: int,
    cp: int,
    micro_batch: int = 1,
    tp: int = 1,
    dtype: Dtype = Dtype.bf16,
    grad_dtype: Dtype | None = None,
    link: Link = Link.intra_node,
    with_latency: bool = False,
    nodes: int | None = None,
) -> CpRing:
    """Ring-attention traffic and overlap check for one cp.

    Counted per rank per micro-batch (forward + backward), on ``spec.full_attention_layers``:
    forward sends cp-1 K,V blocks; backward sends the K,V blocks again (cp-1) and the dK,dV
    accumulators, which travel one step behind their block (cp-1 sends, in ``grad_dtype``;
    ring-flash-attention accumulates them in fp32 and adds a last hop home, Transformer Engine
    does not). Sources: ``RING``,
    ``RING_BWD``. With ``tp`` > 1 each rank of the ring holds only its TP share of the heads
    (CP inside TP, Megatron order). ``nodes`` = nodes the ring spans (default
    ``links.link_nodes``) for its latency steps.
    """
    if cp < 1:
        raise InputError(f"cp={cp} must be a positive integer")
    if micro_batch < 1:
        raise InputError(f"micro_batch={micro_batch} must be a positive integer")
    grad_dtype = grad_dtype or dtype
    local = divide(seq, cp, what="seq", by="cp")
    n_kv, d_k, d_v = kv_dims(spec, tp)
    block = kv_block_bytes(spec, seq=seq, cp=cp, micro_batch=micro_batch, dtype=dtype, tp=tp)
    grad_block = block // dtype.bytes * grad_dtype.bytes
    steps = cp - 1
    grad_sends = steps
    L = spec.full_attention_layers
    fwd = steps * block
    bwd_kv = steps * block
    bwd_dkv = grad_sends * grad_block
    per_layer = fwd + bwd_kv + bwd_dkv
    total = L * per_layer
    flop = block_pair_flop(spec, seq=seq, cp=cp, micro_batch=micro_batch, tp=tp)
    achieved = hw.achieved_flop_per_s.value
    nodes = link_nodes(link, cp) if nodes is None else nodes
    hop = ring_steps(Collective.p2p, cp, nodes)
    ring_lat = ring_latency_steps_per_layer(cp, nodes).times(L)
    kv_time = steps_time_s(block, hop, hw, link, with_latency=with_latency) if cp > 1 else 0.0
    attn_time = flop / achieved
    return CpRing(
        tokens_per_rank=local,
        n_kv=n_kv,
        d_k=d_k,
        d_v=d_v,
        q_heads=q_heads_per_rank(spec, tp),
        kv_block_bytes=block,
        grad_block_bytes=grad_block,
        ring_steps=steps,
        full_attention_layers=L,
        fwd_kv_bytes_per_layer=fwd,
        bwd_kv_bytes_per_layer=bwd_kv,
        bwd_dkv_bytes_per_layer=bwd_dkv,
        ring_sends_per_layer_count=ring_sends_per_layer(cp),
        send_bytes_per_layer=per_layer,
        fwd_send_bytes_per_micro_batch=L * fwd,
        bwd_send_bytes_per_micro_batch=L * (bwd_kv + bwd_dkv),
        send_bytes_per_micro_batch=total,
        nodes=nodes,
        bandwidth_bytes_per_s=bandwidth_bytes_per_s(hw, link),
        hop=hop,
        ring_latency=ring_lat,
        comm_time_s=steps_time_s(total, ring_lat, hw, link, with_latency=with_latency),
        kv_step_time_s=kv_time,
        block_pair_flop=flop,
        achieved_flop_per_s=achieved,
        attn_step_time_s=attn_time,
        kv_over_compute_ratio=kv_time / attn_time,
        ulysses_max_cp=n_kv,
        ulysses_fits=ulysses_fits(spec, cp),
    )
