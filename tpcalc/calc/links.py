"""Time on a link: latency + bytes / bandwidth, for the link a process group crosses.

Source: the alpha-beta (Hockney) model, as used in seed 003 §7.1.4 and table 7-7 (which keeps
only the bandwidth term: "只算带宽项，未计延迟项"). The seeds' figures set latency to zero.
"""

from __future__ import annotations

from enum import Enum

from tpcalc.specs import HardwareSpec


class Link(str, Enum):
    intra_node = "nvlink"  # inside one node / NVLink domain
    inter_node = "ib"  # between nodes, through each GPU's NIC


def link_for_group(group_size: int, stride: int, gpus_per_node: int) -> Link:
    """The slowest link a group of ``group_size`` ranks, ``stride`` ranks apart, crosses.

    Ranks are numbered node-major (rank r sits on node r // gpus_per_node). A group whose span
    ``group_size * stride`` fits in one node stays on NVLink; otherwise it crosses nodes.
    """
    return Link.intra_node if group_size * stride <= gpus_per_node else Link.inter_node


def bandwidth_bytes_per_s(hw: HardwareSpec, link: Link) -> float:
    if link is Link.intra_node:
        return hw.intra_node_bandwidth_bytes_per_s.value
    return hw.inter_node_bandwidth_bytes_per_s.value


def latency_s(hw: HardwareSpec, link: Link) -> float:
    if link is Link.intra_node:
        return hw.intra_node_latency_s.value
    return hw.inter_node_latency_s.value


def transfer_time_s(
    bytes_sent: float, n_messages: int, hw: HardwareSpec, link: Link, *, with_latency: bool = True
) -> float:
    """alpha * n_messages + bytes / beta on ``link`` (alpha-beta model; seed 003 table 7-7)."""
    alpha = latency_s(hw, link) if with_latency else 0.0
    return alpha * n_messages + bytes_sent / bandwidth_bytes_per_s(hw, link)
