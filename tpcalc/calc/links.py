"""Time on a link: latency + bytes / bandwidth, for the link a process group crosses.

Source: the alpha-beta (Hockney) model, as used in seed 003 §7.1.4 and table 7-7 (which keeps
only the bandwidth term: "只算带宽项，未计延迟项"). The seeds' figures set latency to zero.
"""

from __future__ import annotations

import math
from enum import Enum

from tpcalc.specs import HardwareSpec


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
