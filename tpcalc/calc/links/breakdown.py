"""Link-time breakdown terms: bandwidth + latency = time on one link, each with its source.

Source: the alpha-beta (Hockney) model, as in seed 003 §7.1.4 and table 7-7 (bandwidth term
only; the seeds' figures set latency to zero, ``--no-latency``); the latency term counts ring
steps as NCCL does (``tpcalc.calc.links.link.ring_steps``). The raw times come from
``tpcalc.calc.links.link``; this module turns them into ``Term`` s that add up (``part_of``).
"""

from __future__ import annotations

from tpcalc.calc.links.link import (
    LATENCY_FORMULA,
    LatencySteps,
    Link,
    bandwidth_bytes_per_s,
    latency_inputs,
    latency_source,
)
from tpcalc.specs import HardwareSpec
from tpcalc.terms import Term, Unit, term


def link_time_terms(
    name: str,
    label: str,
    link: Link,
    bytes_: float,
    steps: LatencySteps,
    hw: HardwareSpec,
    with_latency: bool,
) -> list[Term]:
    """``{name}_bandwidth_time_s`` + ``{name}_latency_time_s`` = ``{name}_time_s`` on ``link``.

    bytes / bandwidth plus intra_steps·α_intra + inter_steps·α_inter (alpha-beta model, seed
    003 table 7-7; steps per NCCL's ring model, ``links.ring_steps``).
    """
    bw = bandwidth_bytes_per_s(hw, link)
    bw_time = bytes_ / bw
    lat_time = steps.time_s(hw) if with_latency else 0.0
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
            formula=LATENCY_FORMULA,
            source=latency_source(hw, with_latency),
            part_of=total,
            **latency_inputs(hw, steps, with_latency),
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
