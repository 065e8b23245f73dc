"""Which link a process group crosses: tiling groups stay on NVLink, straddling ones do not."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpcalc.calc.layout.groups import ParallelLayout, place_groups
from tpcalc.calc.links.link import Link, link_for_group
from tpcalc.choices import LinkChoice
from tpcalc.reports.inputs import pick_link


def crosses_a_node(size: int, stride: int, gpus_per_node: int) -> bool:
    """Brute force: lay out every group of this shape (Megatron order: blocks of size·stride
    consecutive ranks, group j of a block = ranks j, j+stride, ...) over one period of the
    block/node pattern and report whether any group has members on two nodes."""
    span = size * stride
    world = math.lcm(span, gpus_per_node)
    for block in range(0, world, span):
        for j in range(stride):
            members = [block + j + i * stride for i in range(size)]
            if len({r // gpus_per_node for r in members}) > 1:
                return True
    return False


@pytest.mark.parametrize(
    ("size", "stride", "gpus_per_node", "expected"),
    [
        (4, 1, 6, Link.inter_node),  # span 4 on 6-GPU nodes: ranks 4..7 sit on nodes 0 and 1
        (3, 2, 8, Link.inter_node),  # span 6 on 8-GPU nodes: ranks 6..11 straddle
        (4, 1, 8, Link.intra_node),  # span 4 tiles an 8-GPU node
        (2, 2, 8, Link.intra_node),  # span 4 tiles
        (3, 2, 6, Link.intra_node),  # span 6 fills a 6-GPU node exactly
        (8, 1, 8, Link.intra_node),  # seed 000: TP 8 stays in the node
        (16, 1, 8, Link.inter_node),  # wider than a node
        (2, 8, 8, Link.inter_node),  # members a whole node apart
        (1, 16, 8, Link.intra_node),  # one rank crosses no link
    ],
)
def test_link_for_group(size, stride, gpus_per_node, expected):
    assert link_for_group(size, stride, gpus_per_node) is expected


@given(
    size=st.integers(1, 12),
    stride=st.integers(1, 12),
    gpus_per_node=st.integers(1, 16),
)
def test_link_matches_placement(size, stride, gpus_per_node):
    """Inter-node exactly when some group of the shape has members on two nodes."""
    link = link_for_group(size, stride, gpus_per_node)
    assert (link is Link.inter_node) == crosses_a_node(size, stride, gpus_per_node)


def test_straddling_tp_group_in_a_layout_and_in_auto_link_choice():
    # tp=4 on 6-GPU nodes: the layout and the dp/zero/pipeline 'auto' link both price it on IB
    groups = place_groups(ParallelLayout(tp=4, dp=3, gpus_per_node=6))
    assert groups["tp"].link is Link.inter_node and groups["tp"].straddles
    assert pick_link(LinkChoice.auto, 4, 1, 6) is Link.inter_node
    assert pick_link(LinkChoice.auto, 4, 1, 8) is Link.intra_node


@settings(max_examples=300, deadline=None)
@given(size=st.integers(1, 40), stride=st.integers(1, 40), gpn=st.integers(1, 16))
def test_nodes_spanned_matches_enumeration(size, stride, gpn):
    """The closed form equals enumerating one period of the Megatron placement."""
    from tpcalc.calc.links.link import nodes_spanned

    span = size * stride
    period = math.lcm(span, gpn)
    brute = max(
        len({(start + offset + k * stride) // gpn for k in range(size)})
        for start in range(0, period, span)
        for offset in range(stride)
    )
    assert nodes_spanned(size, stride, gpn) == brute
