"""Time on a link: latency + bytes / bandwidth, for the link a process group crosses.

Source: the alpha-beta (Hockney) model, as used in seed 003 §7.1.4 and table 7-7 (which keeps
only the bandwidth term: "只算带宽项，未计延迟项"). The seeds' figures set latency to zero.

Latency follows NCCL's own ring model (``src/graph/tuning.cc``, ``ncclTopoTuneModel``): a ring
collective over n ranks on N nodes takes nsteps steps, of which only nInterSteps cross the
network; latency = (nsteps − nInterSteps)·α_intra + nInterSteps·α_inter. All-reduce has
2(n−1) steps, 2(N−1) between nodes; all-gather and reduce-scatter n−1 and N−1. NCCL's
once-per-collective ``baseLat`` is left out (the hardware configs say so).
"""

from __future__ import annotations

import math
from enum import Enum

from msgspec import Struct

from tpcalc.calc.links.collectives import Collective
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec

LATENCY_FORMULA = "intra_steps·α_intra + inter_steps·α_inter"
SRC_RING_LATENCY = (
    "NCCL src/graph/tuning.cc ncclTopoTuneModel (ring): (nsteps − nInterSteps)·intraLat + "
    "nInterSteps·interLat; all-reduce 2(n−1) steps, 2(N−1) inter-node; all-gather and "
    "reduce-scatter n−1, N−1; one send: 1 step, inter-node if the group spans nodes"
)


class Link(str, Enum):
    intra_node = "nvlink"  # inside one node / NVLink domain
    inter_node = "ib"  # between nodes, through each GPU's NIC


def nodes_spanned(group_size: int, stride: int, gpus_per_node: int) -> int:
    """The most nodes any one group of ``group_size`` ranks, ``stride`` ranks apart, touches.

    Ranks are numbered node-major (rank r sits on node r // gpus_per_node) and the groups of one
    shape tile the ranks in blocks of span = group_size·stride, ``stride`` interleaved groups per
    block (Megatron rank order). With stride ≥ gpus_per_node every member is on its own node.
    Otherwise no node between a group's first and last member is skipped, so a group starting
    at node offset r touches (r + (size-1)·stride) // G + 1 nodes; the starts are m·span + o
    (o < stride), whose offsets reach at most G − gcd(span, G) + stride − 1 (capped at G − 1).
    Span 4 on 6-GPU nodes: ranks 4..7 sit on nodes 0 and 1, so 2.
    """
    if group_size <= 1:
        return 1
    if stride >= gpus_per_node:
        return group_size
    g = math.gcd(group_size * stride, gpus_per_node)
    worst_offset = min(gpus_per_node - 1, gpus_per_node - g + stride - 1)
    return (worst_offset + (group_size - 1) * stride) // gpus_per_node + 1


def link_for_group(group_size: int, stride: int, gpus_per_node: int) -> Link:
    """The slowest link any group of ``group_size`` ranks, ``stride`` ranks apart, crosses: NVLink
    when every such group sits inside one node (``nodes_spanned`` = 1), else the inter-node link.
    A one-rank group crosses no link."""
    if group_size <= 1 or nodes_spanned(group_size, stride, gpus_per_node) == 1:
        return Link.intra_node
    return Link.inter_node


def bandwidth_bytes_per_s(hw: HardwareSpec, link: Link) -> float:
    """One-direction bandwidth of ``link`` per GPU, from the hardware config (bytes/s)."""
    if link is Link.intra_node:
        return hw.intra_node_bandwidth_bytes_per_s.value
    return hw.inter_node_bandwidth_bytes_per_s.value


def latency_s(hw: HardwareSpec, link: Link) -> float:
    """alpha of ``link``: the per-message latency from the hardware config (seconds)."""
    if link is Link.intra_node:
        return hw.intra_node_latency_s.value
    return hw.inter_node_latency_s.value


def transfer_time_s(
    bytes_sent: float, n_messages: int, hw: HardwareSpec, link: Link, *, with_latency: bool = True
) -> float:
    """alpha * n_messages + bytes / beta on ``link`` (alpha-beta model; seed 003 table 7-7)."""
    alpha = latency_s(hw, link) if with_latency else 0.0
    return alpha * n_messages + bytes_sent / bandwidth_bytes_per_s(hw, link)


def link_nodes(link: Link, group_size: int) -> int:
    """Nodes a group is taken to span when only its link is known (e.g. ``--link`` forced it):
    1 on NVLink; on the inter-node link, one rank per node, so every ring step crosses it."""
    return 1 if link is Link.intra_node else group_size


class LatencySteps(Struct, frozen=True):
    """Latency steps of one or more collectives: intra-node and inter-node (NCCL tuning.cc)."""

    intra: int = 0
    inter: int = 0

    def __add__(self, other: LatencySteps) -> LatencySteps:
        return LatencySteps(self.intra + other.intra, self.inter + other.inter)

    def times(self, count: int) -> LatencySteps:
        return LatencySteps(self.intra * count, self.inter * count)

    def time_s(self, hw: HardwareSpec) -> float:
        """intra·α_intra + inter·α_inter, seconds (α from the hardware config)."""
        return self.intra * latency_s(hw, Link.intra_node) + self.inter * latency_s(
            hw, Link.inter_node
        )


def ring_steps(collective: Collective, group_size: int, nodes: int, count: int = 1) -> LatencySteps:
    """Intra- and inter-node latency steps of ``count`` collectives over ``group_size`` ranks
    spread over ``nodes`` nodes (``nodes_spanned``), per NCCL's ring model (module docstring).

    All-reduce: 2(n−1) steps, 2(N−1) of them inter-node; all-gather / reduce-scatter: n−1 and
    N−1. A send/recv or an all-to-all (NCCL runs it as one round of concurrent sends) is one
    step, inter-node when the group spans more than one node.
    """
    if group_size < 1 or not 1 <= nodes <= group_size:
        raise InputError(
            f"nodes={nodes} must be between 1 and the group size {group_size} (a positive integer)"
        )
    if group_size == 1:
        return LatencySteps()
    if collective is Collective.all_reduce:
        total, inter = 2 * (group_size - 1), 2 * (nodes - 1)
    elif collective in (Collective.all_gather, Collective.reduce_scatter):
        total, inter = group_size - 1, nodes - 1
    else:
        total, inter = 1, int(nodes > 1)
    return LatencySteps(total - inter, inter).times(count)


def ring_latency_s(
    hw: HardwareSpec, collective: Collective, group_size: int, nodes: int, count: int = 1
) -> float:
    """Latency of ``count`` collectives: ``ring_steps`` priced at the two α of ``hw``."""
    return ring_steps(collective, group_size, nodes, count).time_s(hw)


def latency_inputs(hw: HardwareSpec, steps: LatencySteps, with_latency: bool) -> dict:
    """The symbols of a latency term, for --explain: step counts and both α (0 when off)."""
    return {
        "intra_steps": steps.intra,
        "inter_steps": steps.inter,
        "alpha_intra_s": latency_s(hw, Link.intra_node) if with_latency else 0.0,
        "alpha_inter_s": latency_s(hw, Link.inter_node) if with_latency else 0.0,
    }


def latency_source(hw: HardwareSpec, with_latency: bool) -> str:
    """Where a latency term comes from: NCCL's ring model and the two α of the hardware config."""
    if not with_latency:
        return "latency off (--no-latency, as the seeds)"
    return (
        f"{SRC_RING_LATENCY}; {hw.name} α_intra: {hw.intra_node_latency_s.source}; "
        f"α_inter: {hw.inter_node_latency_s.source}"
    )


def steps_time_s(
    bytes_sent: float, steps: LatencySteps, hw: HardwareSpec, link: Link, *, with_latency: bool
) -> float:
    """bytes / bandwidth of ``link`` + the latency of ``steps`` (when ``with_latency``)."""
    latency = steps.time_s(hw) if with_latency else 0.0
    return bytes_sent / bandwidth_bytes_per_s(hw, link) + latency
