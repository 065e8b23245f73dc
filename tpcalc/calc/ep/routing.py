"""Expert-parallel routing over nodes: how many of a token's k copies cross the IB link.

Model (stated, since the sources give no closed formula). The EP group spans N nodes; experts
and the source node are uniform. A token's k copies then land off-node with probability
(N-1)/N each, so ``uniform`` routing sends k(N-1)/N copies per token over IB. DeepSeek-V3
limits each token to at most M nodes (§2.1.2, "node-limited routing", M = 4 via ``topk_group``)
and sends one copy per target node over IB, forwarding it over NVLink to the experts on that
node (§3.2.2); the home node is among the M with probability M/N, so ``node_limited`` sends
min(M,N,k)(N-1)/N copies per token over IB. Everything else off the rank (k(ep-1)/ep copies in
all) travels over NVLink.
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.calc.links.collectives import Collective
from tpcalc.calc.links.link import Link, bandwidth_bytes_per_s, ring_steps
from tpcalc.choices import EpRouting
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.units import Dtype

SRC_A2A = (
    "Lepikhin et al. 2021 GShard §2.2 (dispatch and combine all-to-all); seed 000 summary: "
    "one all-to-all before and one after the FFN"
)
SRC_NODE = "DeepSeek-V3 (arXiv 2412.19437) §2.1.2 node-limited routing; §3.2.2 IB then NVLink"


def max_nodes_per_token(spec: ModelSpec) -> int | None:
    """M of node-limited routing: ``topk_group`` groups (= nodes in DeepSeek-V3), or None."""
    return spec.topk_group if spec.n_group is not None else None


def copies_per_token(
    k: int, ep: int, nodes: int, routing: EpRouting, max_nodes: int | None
) -> tuple[float, float]:
    """(copies sent over IB, copies sent over NVLink) per token, per dispatch.

    Off-rank copies k(ep-1)/ep in all; IB copies k(N-1)/N (uniform) or min(M,N,k)(N-1)/N
    (node-limited: one IB copy per remote node; a token reaches at most k nodes).
    Source: ``SRC_NODE`` and the module docstring.
    """
    off_rank = k * (ep - 1) / ep
    if routing is EpRouting.node_limited and max_nodes is not None:
        ib = min(max_nodes, nodes, k) * (nodes - 1) / nodes
    else:
        ib = k * (nodes - 1) / nodes
    return ib, max(0.0, off_rank - ib)


class AllToAll(Struct, frozen=True):
    """One all-to-all of an MoE layer on one rank: the bytes it sends over IB and NVLink, and
    its time, the slower link + one latency step."""

    dtype_bytes: int
    ib_send_bytes: float
    nvlink_send_bytes: float
    send_bytes: float
    time_s: float


def all_to_all(
    tokens: int,
    hidden: int,
    dtype: Dtype,
    ib_copies: float,
    nv_copies: float,
    hw: HardwareSpec,
    with_latency: bool,
    ep: int,
    nodes: int,
) -> AllToAll:
    """One all-to-all over ``ep`` ranks on ``nodes`` nodes: tokens·copies·h·dtype bytes per link,
    time max(IB, NVLink) + one latency step (``links.ring_steps``). Source: ``SRC_A2A``."""
    per_copy = tokens * hidden * dtype.bytes
    ib_b, nv_b = ib_copies * per_copy, nv_copies * per_copy
    t_ib = ib_b / bandwidth_bytes_per_s(hw, Link.inter_node)
    t_nv = nv_b / bandwidth_bytes_per_s(hw, Link.intra_node)
    alpha = ring_steps(Collective.all_to_all, ep, nodes).time_s(hw) if with_latency else 0.0
    return AllToAll(
        dtype_bytes=dtype.bytes,
        ib_send_bytes=ib_b,
        nvlink_send_bytes=nv_b,
        send_bytes=ib_b + nv_b,
        time_s=alpha + max(t_ib, t_nv),
    )
