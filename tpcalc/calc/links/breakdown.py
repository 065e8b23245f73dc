"""Time on one link, split into its bandwidth and latency parts, and how each part is explained.

Source: the alpha-beta (Hockney) model, as in seed 003 §7.1.4 and table 7-7 (bandwidth term
only; the seeds' figures set latency to zero, ``--no-latency``); the latency term counts ring
steps as NCCL does (``tpcalc.calc.links.link.ring_steps``).

``link_time`` is the calculator; ``link_time_explanations`` and ``link_time_symbols`` are its
explain table and the numbers substituted into it (``tpcalc.explain``).
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.calc.links.link import (
    LATENCY_FORMULA,
    LatencySteps,
    Link,
    bandwidth_bytes_per_s,
    latency_inputs,
)
from tpcalc.explain import Explanation
from tpcalc.specs import HardwareSpec
from tpcalc.terms import Scalar, Unit


class LinkTime(Struct, frozen=True):
    """bandwidth_time_s + latency_time_s = time_s for some bytes on one link."""

    link: Link
    steps: LatencySteps
    bandwidth_time_s: float
    latency_time_s: float
    time_s: float


def link_time(
    link: Link, bytes_sent: float, steps: LatencySteps, hw: HardwareSpec, with_latency: bool
) -> LinkTime:
    """bytes / bandwidth + intra_steps·α_intra + inter_steps·α_inter on ``link`` (alpha-beta
    model, seed 003 table 7-7; steps per NCCL's ring model, ``links.link.ring_steps``)."""
    bandwidth_s = bytes_sent / bandwidth_bytes_per_s(hw, link)
    latency_s = steps.time_s(hw) if with_latency else 0.0
    return LinkTime(link, steps, bandwidth_s, latency_s, bandwidth_s + latency_s)


def link_time_explanations(label: str, latency_src: str) -> dict[str, Explanation]:
    """The explain table of ``LinkTime``; ``label`` names the link ("NVLink"), ``latency_src``
    is ``links.link.latency_source`` (it names the hardware config's α)."""
    return {
        "bandwidth_time_s": Explanation(
            f"{label} bandwidth", Unit.seconds, "bytes / bandwidth",
            "alpha-beta model; seed 003 table 7-7", "time_s",
        ),
        "latency_time_s": Explanation(
            f"{label} latency", Unit.seconds, LATENCY_FORMULA, latency_src, "time_s"
        ),
        "time_s": Explanation(
            f"{label} time", Unit.seconds, "latency + bytes / bandwidth",
            "alpha-beta (Hockney) model",
        ),
    }  # fmt: skip


def link_time_symbols(
    lt: LinkTime, bytes_sent: float, hw: HardwareSpec, with_latency: bool
) -> dict[str, dict[str, Scalar]]:
    """The numbers substituted into each formula of ``link_time_explanations`` (--explain)."""
    return {
        "bandwidth_time_s": {
            "bytes": bytes_sent,
            "bandwidth_bytes_per_s": bandwidth_bytes_per_s(hw, lt.link),
        },
        "latency_time_s": latency_inputs(hw, lt.steps, with_latency),
    }
