"""Tensor-parallel communication: bytes per collective, per layer, per step, and link time.

Megatron TP (Shoeybi et al. 2019 §3) puts a conjugate pair f/g around each attention and MLP
block: g all-reduces in the forward pass, f in the backward pass, so a layer has 2 forward + 2
backward all-reduces of one activation [s, b, h] (seed 003 §7.3.3, seed 000's f/g box). Sequence
parallelism (Korthikanti et al. 2022 §4.2.2) replaces each all-reduce with a reduce-scatter +
all-gather pair moving the same bytes. Full recomputation re-runs the forward, repeating its 2
collectives per layer (Korthikanti et al. 2022 §5).

``tp_comm`` returns a ``TpComm`` in base units; its labels, formulas and sources are in
``tpcalc.calc.tp.comm_explain``, beside this module.
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.calc.links.breakdown import LinkTime, link_time
from tpcalc.calc.links.collectives import Collective, ring_factor
from tpcalc.calc.links.link import Link, link_for_group, link_nodes, ring_steps
from tpcalc.calc.tp.blocks import BWD_COLLECTIVES_PER_LAYER, FWD_COLLECTIVES_PER_LAYER
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.units import Dtype


def message_bytes(spec: ModelSpec, *, seq: int, micro_batch: int, dtype: Dtype) -> int:
    """M = s·b·h·bytes(dtype): one activation [s, b, h] (seed 003 §7.3.5; seed 000 q-tp-msg)."""
    return seq * micro_batch * spec.hidden_size * dtype.bytes


def collectives_per_layer(recompute_full: bool) -> tuple[int, int, int]:
    """(forward, backward, recomputed forward) all-reduce-equivalents per layer per micro-batch."""
    return (
        FWD_COLLECTIVES_PER_LAYER,
        BWD_COLLECTIVES_PER_LAYER,
        FWD_COLLECTIVES_PER_LAYER if recompute_full else 0,
    )


class TpComm(Struct, frozen=True):
    """TP traffic of one micro-batch forward + backward on one rank, and its link times.

    Bytes are what one rank sends (ring convention) unless the name says ``message``. With SP
    each all-reduce is one all-gather plus one reduce-scatter of the same total bytes, so the
    per-layer and per-step figures do not depend on SP; only the collective kinds do.
    """

    t: int
    layers: int
    message_bytes: int
    forward_collectives_per_layer: int
    backward_collectives_per_layer: int
    recompute_collectives_per_layer: int
    collectives_per_layer: int
    send_bytes_per_allreduce: float
    send_bytes_per_allgather: float
    send_bytes_per_reduce_scatter: float
    send_bytes_per_layer: float
    forward_send_bytes_per_step: float
    backward_send_bytes_per_step: float
    recompute_send_bytes_per_step: float
    send_bytes_per_step: float
    message_bytes_per_step: int
    nvlink: LinkTime  # the group priced as if inside one node
    ib: LinkTime  # the group priced one rank per node (every ring step crosses the network)
    compute_time_s: float
    nvlink_share: float
    ib_share: float
    tp_link: Link  # the link the group really crosses


def tp_comm(
    spec: ModelSpec,
    hw: HardwareSpec,
    *,
    t: int,
    seq: int,
    micro_batch: int = 1,
    dtype: Dtype = Dtype.bf16,
    recompute_full: bool = False,
    with_latency: bool = True,
    compute_time_s: float,
) -> TpComm:
    """Per layer 4 all-reduces of M (8(t-1)/t·s·b·h elements sent per rank: seed 003 §7.3.5,
    Narayanan et al. 2021 §3.2); with SP, 4 all-gathers + 4 reduce-scatters of the same bytes.

    ``compute_time_s`` is the rank's compute for the same micro-batch (``tpcalc.calc.tp.flops``);
    the shares are link time over it (seed 003 table 7-7: 15% on NVLink, 139% between nodes).
    """
    M = message_bytes(spec, seq=seq, micro_batch=micro_batch, dtype=dtype)
    L = spec.num_hidden_layers
    fwd, bwd, rec = collectives_per_layer(recompute_full)
    n = fwd + bwd + rec
    all_reduce = ring_factor(Collective.all_reduce, t) * M  # 2(t-1)/t · M
    half = ring_factor(Collective.all_gather, t) * M  # (t-1)/t · M, each AG and RS under SP
    step = n * all_reduce * L
    # Each link prices the TP group as if it sat there: inside one node, or one rank per node
    # (every ring step then crosses the network, seed 003 table 7-7's "跨节点").
    nvlink, ib = (
        link_time(
            link,
            step,
            ring_steps(Collective.all_reduce, t, link_nodes(link, t), n * L),
            hw,
            with_latency,
        )
        for link in (Link.intra_node, Link.inter_node)
    )
    return TpComm(
        t=t,
        layers=L,
        message_bytes=M,
        forward_collectives_per_layer=fwd,
        backward_collectives_per_layer=bwd,
        recompute_collectives_per_layer=rec,
        collectives_per_layer=n,
        send_bytes_per_allreduce=all_reduce,
        send_bytes_per_allgather=half,
        send_bytes_per_reduce_scatter=half,
        send_bytes_per_layer=n * all_reduce,
        forward_send_bytes_per_step=fwd * all_reduce * L,
        backward_send_bytes_per_step=bwd * all_reduce * L,
        recompute_send_bytes_per_step=rec * all_reduce * L,
        send_bytes_per_step=step,
        message_bytes_per_step=n * M * L if t > 1 else 0,
        nvlink=nvlink,
        ib=ib,
        compute_time_s=compute_time_s,
        nvlink_share=nvlink.time_s / compute_time_s,
        ib_share=ib.time_s / compute_time_s,
        tp_link=link_for_group(t, 1, hw.gpus_per_node.value),
    )
