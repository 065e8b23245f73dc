"""Which GPUs form each TP / CP / PP / DP / EP group, and which node each GPU is on.

Group shapes come from ``tpcalc.calc.layout.groups.place_groups`` (Megatron rank order, TP
innermost): a group of ``size`` ranks ``stride`` apart; the groups of one shape tile the ranks in
blocks of size·stride. Rank r sits on node r // gpus_per_node. A group whose members sit on more
than one node is marked, in the map and in the shape line (``links.nodes_spanned`` gives the
most nodes any group of that shape touches).
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.calc.layout.groups import Group, ParallelLayout, place_groups

MAP_DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")  # innermost first, as the rank order nests them
MAX_NODES_SHOWN = 4  # big worlds: the first nodes, plus every group's shape
MAX_GPUS_SHOWN = 128  # and never more GPUs than fit a screen, however big the nodes
PALETTE = ("blue", "green", "magenta", "cyan", "yellow", "bright_blue", "bright_green", "purple")
CROSS_STYLE = "bold white on red"


class GroupMap(Struct, frozen=True):
    """One dimension's groups over the GPUs shown: ``group_of[gpu]`` is the group index of that
    GPU, ``crossing`` the groups with members on more than one node (over the whole world)."""

    dimension: str
    shape: Group
    group_of: tuple[int, ...]
    crossing: frozenset[int]


def group_members(rank: int, size: int, stride: int) -> tuple[int, ...]:
    """The ranks in the group of ``rank``: blocks of size·stride, ``stride`` groups interleaved."""
    span = size * stride
    base = (rank // span) * span + rank % stride
    return tuple(base + i * stride for i in range(size))


def group_index(rank: int, size: int, stride: int) -> int:
    """A number for the group of ``rank``, unique over the world."""
    span = size * stride
    return (rank // span) * stride + rank % stride


def layout_map(layout: ParallelLayout, gpus_shown: int) -> tuple[GroupMap, ...]:
    """The groups of every dimension larger than one over GPUs 0..gpus_shown-1."""
    g = layout.gpus_per_node
    out = []
    for dim, shape in place_groups(layout).items():
        if shape.size <= 1:
            continue
        group_of = tuple(group_index(r, shape.size, shape.stride) for r in range(gpus_shown))
        crossing = frozenset(
            gi
            for r in range(gpus_shown)
            if len({m // g for m in group_members(r, shape.size, shape.stride)}) > 1
            for gi in [group_index(r, shape.size, shape.stride)]
        )
        out.append(GroupMap(dim, shape, group_of, crossing))
    return tuple(sorted(out, key=lambda gm: MAP_DIMENSIONS.index(gm.dimension)))


def gpus_to_show(layout: ParallelLayout) -> int:
    """The whole world when it is at most four nodes, else the first four nodes (at most 128
    GPUs)."""
    return min(layout.world, MAX_NODES_SHOWN * layout.gpus_per_node, MAX_GPUS_SHOWN)


def render_map(layout: ParallelLayout, title: str):
    """A rich renderable: per dimension, one line per node shown, each GPU cell labelled with
    its group (colour per group); groups that leave their node in red with a '*'."""
    from rich.console import Group as RichGroup
    from rich.text import Text

    shown = gpus_to_show(layout)
    g = layout.gpus_per_node
    nodes = -(-shown // g)
    maps = layout_map(layout, shown)
    lines = [Text(title, style="bold")]
    if shown < layout.world:
        lines.append(
            Text(f"GPUs 0..{shown - 1} of {layout.world} (the first {nodes} node"
                 f"{'s' if nodes > 1 else ''}); every group has the shape on its line",
                 style="dim")
        )  # fmt: skip
    if not maps:
        lines.append(Text("every dimension is 1: no groups"))
    for gm in maps:
        s = gm.shape
        where = (
            "inside one node"
            if s.nodes == 1
            else f"up to {s.nodes} nodes" + (" (some groups straddle)" if s.straddles else "")
        )
        label = "DP (dp·cp)" if gm.dimension == "dp" and layout.cp > 1 else gm.dimension.upper()
        head = Text(f"{label}: groups of {s.size}, ranks {s.stride} apart, {where}; "
                    f"{s.link.value}")  # fmt: skip
        if gm.crossing:
            head.append("  * leaves its node", style=CROSS_STYLE)
        lines.append(head)
        width = len(str(max(gm.group_of))) + 1
        for node in range(nodes):
            line = Text(f"  node {node:<3}│")
            for r in range(node * g, min(shown, (node + 1) * g)):
                gi = gm.group_of[r]
                crosses = gi in gm.crossing
                cell = f"{gi}{'*' if crosses else ''}".rjust(width + 1)
                line.append(cell, style=CROSS_STYLE if crosses else PALETTE[gi % len(PALETTE)])
            last = min(shown, (node + 1) * g) - 1
            line.append(f" │ GPUs {node * g}-{last}", style="dim")
            lines.append(line)
    lines.append(
        Text("cells: the group number of each GPU, GPUs in rank order (Megatron: TP innermost, "
             "then CP, DP, PP); GPU r is on node r // gpus_per_node", style="dim")
    )  # fmt: skip
    return RichGroup(*lines)
