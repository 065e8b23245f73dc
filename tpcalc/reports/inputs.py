"""Validate the shared inputs of every report: sizes, the size lists (one parser for every
--tp/--dp/--pp/--cp/--ep), the node size, the defaulted-seq note, the link a group is priced
on, and a TP sweep with its warnings (``tp_sweep``, ``tp_warnings``: shared by the comm, flops,
memory, dp and cp/ep reports). Loading the model and hardware is
``tpcalc.reports.request.Workload.load``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpcalc.calc.links.link import Link, link_for_group, link_nodes, nodes_spanned
from tpcalc.choices import LinkChoice
from tpcalc.errors import InputError
from tpcalc.specs import ModelSpec

if TYPE_CHECKING:
    from tpcalc.reports.request import Workload

# Beyond this a "size" is surely a typo (and floats would lose integer exactness).
MAX_SIZE = 10**12


def positive(value: int, name: str) -> int:
    """Zero, negative or absurd sizes are content errors that name the option."""
    if value <= 0:
        raise InputError(f"{name} must be a positive integer, got {value}")
    if value > MAX_SIZE:
        raise InputError(f"{name}={value} is beyond any real run (max {MAX_SIZE:,})")
    return value


def int_list(
    value: str | int | list[int] | None,
    option: str,
    default: list[int],
    *,
    example: str = "8,64",
) -> list[int]:
    """A size sweep: '8', '8,64' or [8, 64] -> positive ints; None -> ``default``.

    The one list parser of every command (--tp, --dp, --pp, --cp, --ep). An empty entry
    ('1,,2', '8,') is an error, like any entry that is not an integer: the message names the
    option and an example.
    """
    if value is None:
        return list(default)
    if isinstance(value, int):
        values = [value]
    elif isinstance(value, str):
        try:
            values = [int(v) for v in value.replace(" ", "").split(",")]
        except ValueError:
            raise InputError(
                f"{option} {value!r}: give an integer or a list like {example}"
            ) from None
    else:
        values = list(value)
    if not values:
        raise InputError(f"{option}: give at least one value, e.g. 8 or {example}")
    return [positive(v, option) for v in values]


def powers_of_two_up_to(limit: int) -> list[int]:
    """1, 2, 4, ... up to ``limit``: the default t sweep (TP stays inside a node)."""
    values, t = [], 1
    while t <= limit:
        values.append(t)
        t *= 2
    return values


def parse_tp_list(tp: str | int | list[int] | None, gpus_per_node: int) -> list[int]:
    """A t sweep: the values given ('8', '1,2,4,8', [1, 8]) or powers of two up to a node."""
    return int_list(tp, "--tp", powers_of_two_up_to(gpus_per_node), example="1,2,4,8")


def pick_link(choice: LinkChoice, group: int, stride: int, gpus_per_node: int) -> Link:
    """The link a group of ``group`` ranks ``stride`` apart crosses, unless forced."""
    if choice is LinkChoice.nvlink:
        return Link.intra_node
    if choice is LinkChoice.ib:
        return Link.inter_node
    return link_for_group(group, stride, gpus_per_node)


def pick_nodes(choice: LinkChoice, group: int, stride: int, gpus_per_node: int) -> int:
    """Nodes the group spans (for its latency steps): by rank order, or as the forced link
    implies (``links.link_nodes``: one node on NVLink, one rank per node on IB)."""
    if choice is LinkChoice.auto:
        return nodes_spanned(group, stride, gpus_per_node)
    return link_nodes(pick_link(choice, group, stride, gpus_per_node), group)


def node_size(gpus_per_node: int | None, hardware_default: int) -> int:
    """--gpus-per-node, validated, or the hardware config's value."""
    return hardware_default if gpus_per_node is None else positive(gpus_per_node, "--gpus-per-node")


def seq_warnings(spec: ModelSpec, seq: int | None) -> list[str]:
    """The stderr note when --seq was not given and the model's length is tpcalc's default (an
    imported config.json states no training length; ``tpcalc.hf`` picks one and says why)."""
    if seq is not None or not spec.tpcalc.seq_length_defaulted:
        return []
    return [f"seq defaulted to {spec.seq_length:,} ({spec.tpcalc.seq_length_source}); set --seq"]


def tp_sweep(workload: Workload, tp: str | int | list[int] | None) -> list[int]:
    """The t values of a sweep ('8', '1,2,4,8', [1, 8]); None: powers of two up to a node."""
    return parse_tp_list(tp, workload.hw.gpus_per_node.value)


def tp_warnings(workload: Workload, tps: list[int]) -> list[str]:
    """Impossible splits raise (t must divide the query heads, ...); KV replication only warns.
    The workload's own notes (the defaulted sequence length) come first."""
    from tpcalc.calc.tp.rules import kv_warning, require_tp

    warnings = list(workload.warnings)
    for t in tps:
        require_tp(workload.spec, t)
        message = kv_warning(workload.spec, t)
        if message:
            warnings.append(message)
    return warnings
