"""Context parallelism: ring attention K/V traffic, causal load balance, Ulysses' head limit.

A sequence of s tokens is split over ``cp`` ranks; each rank keeps s/cp tokens of every
activation. Attention needs every K and V, so the K/V blocks travel around a ring: at each of
cp-1 steps a rank sends the block it holds to its neighbour while it computes attention of its
queries against the block it received (Liu et al. 2023, "Ring Attention with Blockwise
Transformers", arXiv 2310.01889, §3; seed 000 summary: "让 K、V 块沿环传一圈").

Only layers with softmax attention over the whole sequence need the ring. In a hybrid model
(Qwen3.8: 16 full-attention layers of 64) the linear-attention layers pass no K/V, so tpcalc
counts ``spec.full_attention_layers`` and says so. Block sizes, the FLOP of one ring step and
Ulysses' head limit are in ``tpcalc.calc.cp.shapes``; this module assembles the row.
"""

from __future__ import annotations

from tpcalc.calc.cp.causal import causal_terms
from tpcalc.calc.cp.shapes import (
    FLASH,
    RING,
    block_pair_flop,
    kv_block_bytes,
    kv_dims,
    q_heads_per_rank,
    ulysses_terms,
)
from tpcalc.calc.links.collectives import Collective
from tpcalc.calc.links.link import (
    LATENCY_FORMULA,
    LatencySteps,
    Link,
    bandwidth_bytes_per_s,
    latency_inputs,
    latency_source,
    link_nodes,
    ring_steps,
    steps_time_s,
)
from tpcalc.errors import InputError, divide
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Row, Unit, term
from tpcalc.units import Dtype

RING_BWD = (
    "Liu et al. 2023 Ring Attention §3 (backward circulates K,V and dK,dV); Megatron-Core CP via "
    "TransformerEngine AttnFuncWithCPAndKVP2P.backward: K,V sent cp-1 times, dK,dV cp times"
)


KV_PASSES = 2  # K,V circulate in the forward and again in the backward (``RING_BWD``)


def ring_sends_per_layer(cp: int) -> int:
    """Sends of one rank per ring layer, fwd + bwd: cp−1 K,V blocks forward, cp−1 backward and
    cp dK,dV blocks (their last hop brings them home): 3cp − 2, none for cp = 1 (``RING_BWD``)."""
    return KV_PASSES * (cp - 1) + cp if cp > 1 else 0


def ring_latency_steps_per_layer(cp: int, nodes: int) -> LatencySteps:
    """Latency steps of one ring layer, counted as NCCL counts rings (``links.ring_steps``): each
    K,V pass is an all-gather (cp−1 steps), dK,dV a reduce-scatter (cp−1) plus the hop home (1);
    ``ring_sends_per_layer`` steps in all, the node-crossing ones at α_inter."""
    return (
        ring_steps(Collective.all_gather, cp, nodes, KV_PASSES)
        + ring_steps(Collective.reduce_scatter, cp, nodes)
        + ring_steps(Collective.p2p, cp, nodes)
    )


# ---------------------------------------------------------------- the ring, one row
def cp_row(
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
    chunks: int | None = None,
    with_latency: bool = False,
    nodes: int | None = None,
) -> Row:
    """Ring-attention traffic, overlap check, causal balance and Ulysses limit for one cp.

    Counted per rank per micro-batch (forward + backward), on ``spec.full_attention_layers``:
    forward sends cp-1 K,V blocks; backward sends the K,V blocks again (cp-1) and the dK,dV
    accumulators, which travel with their block and make a last hop home (cp sends, in
    ``grad_dtype``; ring-flash-attention accumulates them in fp32). Sources: ``RING``,
    ``RING_BWD``. ``chunks`` (default 2·cp) sets the causal-balance granularity. With ``tp`` > 1
    each rank of the ring holds only its TP share of the heads (CP inside TP, Megatron order).
    ``nodes`` = nodes the ring spans (default ``links.link_nodes``) for its latency steps.
    """
    if cp < 1:
        raise InputError(f"cp={cp} must be a positive integer")
    if micro_batch < 1:
        raise InputError(f"micro_batch={micro_batch} must be a positive integer")
    grad_dtype = grad_dtype or dtype
    chunks = chunks or 2 * cp
    local = divide(seq, cp, what="seq", by="cp")
    n_kv, d_k, d_v = kv_dims(spec, tp)
    block = kv_block_bytes(spec, seq=seq, cp=cp, micro_batch=micro_batch, dtype=dtype, tp=tp)
    grad_block = block // dtype.bytes * grad_dtype.bytes
    steps = cp - 1
    grad_sends = cp if cp > 1 else 0
    layers = spec.full_attention_layers
    fwd = steps * block
    bwd_kv = steps * block
    bwd_dkv = grad_sends * grad_block
    per_layer = fwd + bwd_kv + bwd_dkv
    flop = block_pair_flop(spec, seq=seq, cp=cp, micro_batch=micro_batch, tp=tp)
    achieved = hw.achieved_flop_per_s.value
    nodes = link_nodes(link, cp) if nodes is None else nodes
    hop = ring_steps(Collective.p2p, cp, nodes)  # one K,V block to the next rank
    kv_time = steps_time_s(block, hop, hw, link, with_latency=with_latency) if cp > 1 else 0.0
    attn_time = flop / achieved
    bw = bandwidth_bytes_per_s(hw, link)
    total = layers * per_layer
    sends = ring_sends_per_layer(cp)
    ring_lat = ring_latency_steps_per_layer(cp, nodes).times(layers)
    # fmt: off
    terms = [
        term("tokens_per_rank", "tokens per rank", local, Unit.count, formula="s / cp", source=RING,
             s=seq, cp=cp),
        term("kv_block_bytes", "K,V block per ring step", block, Unit.bytes,
             formula="(s/cp)·b·n_kv·(d_k+d_v)·dtype", source=RING, s=seq, cp=cp, b=micro_batch,
             n_kv=n_kv, d_k=d_k, d_v=d_v, dtype_bytes=dtype.bytes),
        term("ring_steps", "ring steps per layer forward", steps, Unit.count, formula="cp - 1",
             source=RING, cp=cp),
        term("full_attention_layers", "layers with a ring", layers, Unit.count,
             formula="layers whose layer_type is full attention", source="model config layer_types",
             num_hidden_layers=spec.num_hidden_layers),
        term("fwd_kv_bytes_per_layer", "forward K,V sent per layer", fwd, Unit.bytes,
             formula="(cp-1)·block", source=RING, part_of="send_bytes_per_layer", cp=cp,
             block_bytes=block),
        term("bwd_kv_bytes_per_layer", "backward K,V sent per layer", bwd_kv, Unit.bytes,
             formula="(cp-1)·block", source=RING_BWD, part_of="send_bytes_per_layer", cp=cp,
             block_bytes=block),
        term("bwd_dkv_bytes_per_layer", "backward dK,dV sent per layer", bwd_dkv, Unit.bytes,
             formula="cp·block·grad_dtype/dtype", source=RING_BWD, part_of="send_bytes_per_layer",
             cp=cp, grad_block_bytes=grad_block),
        term("ring_sends_per_layer_count", "ring sends per layer, fwd+bwd", sends, Unit.count,
             formula="2(cp-1) + cp", source=RING_BWD, cp=cp),
        term("send_bytes_per_layer", "sent per layer, fwd+bwd", per_layer, Unit.bytes,
             formula="fwd K,V + bwd K,V + bwd dK,dV", source=RING_BWD),
        term("fwd_send_bytes_per_micro_batch", "forward sent, all ring layers", layers * fwd,
             Unit.bytes, formula="L_full·(cp-1)·block", source=RING,
             part_of="send_bytes_per_micro_batch", L_full=layers, fwd_bytes_per_layer=fwd),
        term("bwd_send_bytes_per_micro_batch", "backward sent, all ring layers",
             layers * (bwd_kv + bwd_dkv), Unit.bytes, formula="L_full·(bwd K,V + bwd dK,dV)",
             source=RING_BWD, part_of="send_bytes_per_micro_batch", L_full=layers),
        term("send_bytes_per_micro_batch", "sent per rank per micro-batch", total, Unit.bytes,
             formula="L_full·send_bytes_per_layer", source=RING_BWD, L_full=layers),
        term("comm_time_s", "ring time per micro-batch if not hidden",
             steps_time_s(total, ring_lat, hw, link, with_latency=with_latency), Unit.seconds,
             formula=f"send_bytes / bandwidth + {LATENCY_FORMULA}",
             source="alpha-beta model; " + latency_source(hw, with_latency), send_bytes=total,
             bandwidth_bytes_per_s=bw, link=link.value, nodes=nodes,
             **latency_inputs(hw, ring_lat, with_latency)),
        term("kv_step_time_s", "K,V transfer per ring step", kv_time, Unit.seconds,
             formula=f"block / bandwidth + {LATENCY_FORMULA}",
             source="alpha-beta model; " + latency_source(hw, with_latency), block_bytes=block,
             bandwidth_bytes_per_s=bw, link=link.value, **latency_inputs(hw, hop, with_latency)),
        term("block_pair_flop", "attention FLOP per ring step (one block pair, fwd)", flop,
             Unit.flop, formula="2·c²·b·heads·(d_k+d_v), c = s/cp", source=FLASH, c=local,
             b=micro_batch, heads=q_heads_per_rank(spec, tp), d_k=d_k, d_v=d_v),
        term("attn_step_time_s", "attention compute per ring step", attn_time, Unit.seconds,
             formula="block_pair_flop / achieved FLOP/s", source=FLASH, flop=flop,
             achieved_flop_per_s=achieved),
        term("kv_over_compute_ratio", "transfer / compute per step (<= 1 hides)",
             kv_time / attn_time, Unit.ratio, formula="kv_step_time / attn_step_time",
             source="Liu et al. 2023 §3.1: overlap needs compute >= transfer per block"),
        *ulysses_terms(spec, cp, n_kv),
        *causal_terms(chunks, cp),
    ]
    # fmt: on
    inputs = {
        "model": spec.name,
        "seq": seq,
        "cp": cp,
        "micro_batch": micro_batch,
        "tp": tp,
        "dtype": dtype.value,
        "grad_dtype": grad_dtype.value,
        "link": link.value,
        "chunks": chunks,
        "latency": with_latency,
    }
    return Row(inputs=inputs, terms=tuple(terms))
