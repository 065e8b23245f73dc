"""Link-time breakdown terms: bandwidth + latency = time on one link, each with its source.

Source: the alpha-beta (Hockney) model, as in seed 003 §7.1.4 and table 7-7 (bandwidth term
only; the seeds' figures set latency to zero, ``--no-latency``). The raw times come from
``tpcalc.calc.links``; this module turns them into ``Term`` s that add up (``part_of``).
"""

from __future__ import annotations

from tpcalc.calc.links import Link, bandwidth_bytes_per_s, latency_s
from tpcalc.specs import HardwareSpec
from tpcalc.terms import Term, Unit, term


def latency_src(hw: HardwareSpec, link: Link) -> str:
    """Where the hardware config's latency of ``link`` comes from."""
    return (hw.intra_node_latency_s if link is Link.intra_node else hw.inter_node_latency_s).source


def link_time_terms(
    name: str,
    label: str,
    link: Link,
    bytes_: float,
    steps: int,
    hw: HardwareSpec,
    with_latency: bool,
) -> list[Term]:
    """``{name}_bandwidth_time_s`` + ``{name}_latency_time_s`` = ``{name}_time_s`` on ``link``.

    bytes / bandwidth plus alpha · steps (alpha-beta model; seed 003 table 7-7).
    """
    bw = bandwidth_bytes_per_s(hw, link)
    alpha = latency_s(hw, link) if with_latency else 0.0
    bw_time = bytes_ / bw
    lat_time = alpha * steps
    total = f"{name}_time_s"
    return [
        term(
            f"{name}_bandwidth_time_s",
            f"{label} bandwidth",
            bw_time,
            Unit.seconds,
            formula="bytes / bandwidth",
            source="alpha-beta model; seed 003 table 7-7",
            part_of=total,
            bytes=bytes_,
            bandwidth_bytes_per_s=bw,
        ),
        term(
            f"{name}_latency_time_s",
            f"{label} latency",
            lat_time,
            Unit.seconds,
            formula="alpha · ring steps",
            source=f"alpha-beta model; {hw.name} latency: "
            + (latency_src(hw, link) if with_latency else "off (--no-latency, as the seeds)"),
            part_of=total,
            alpha_s=alpha,
            steps=steps,
        ),
        term(
            total,
            f"{label} time",
            bw_time + lat_time,
            Unit.seconds,
            formula="latency + bytes / bandwidth",
            source="alpha-beta (Hockney) model",
        ),
    ]
