"""A layout's step under the per-operation model: each dimension's time and exposed part.

``calc.layout.price`` prices a layout's bytes per dimension (``calc.layout.comm``); with the
roofline time model (the default) the time and the exposed part of each dimension, and the step
breakdown, come from ``calc.time.step`` instead. Labels and sources: ``timed_explain``.
"""

from __future__ import annotations

from msgspec import Struct
from msgspec.structs import replace

from tpcalc.calc.layout.comm import DimCosts
from tpcalc.calc.layout.summary import Cited, DimensionTotal, dimension_totals
from tpcalc.calc.time.step import StepTime, TimeOptions


def overlap_text(opts: TimeOptions) -> dict[str, str]:
    """The overlap assumption of each dimension, in words (echoed in its row)."""
    ov = opts.overlap

    def said(on: bool, yes: str, no: str) -> str:
        return yes if on else no

    return {
        "tp": said(ov.tp_comm, "chunked under its GEMMs (--tp-comm-overlap)", "exposed"),
        "cp": said(ov.cp_ring, "under the attention blocks", "exposed"),
        "ep": "under the expert GEMMs with DualPipe, else exposed"
        if ov.ep_a2a is None
        else said(ov.ep_a2a, "under the expert GEMMs (--ep-overlap)", "exposed"),
        "pp": said(ov.pp_p2p, "beside compute; what the schedule waits for exposed", "exposed"),
        "dp": said(
            ov.dp_grad_reduce and ov.dp_param_gather,
            "buckets under the backward drain and the forward fill",
            "exposed (--no-dp-overlap)",
        ),
    }


def roofline_costs(costs: DimCosts, st: StepTime) -> DimCosts:
    """Each dimension's bytes as priced, its time and exposed time from the step model."""
    return DimCosts(
        tp=replace(costs.tp, time_s=st.tp_comm_time_s, exposed_s=st.tp_exposed_time_s),
        cp=replace(costs.cp, time_s=st.cp_comm_time_s, exposed_s=st.cp_exposed_time_s),
        pp=replace(costs.pp, time_s=st.pp_comm_time_s, exposed_s=st.pp_exposed_time_s),
        dp=replace(costs.dp, time_s=st.dp_comm_time_s, exposed_s=st.dp_exposed_time_s),
        ep=replace(costs.ep, time_s=st.ep_comm_time_s, exposed_s=st.ep_exposed_time_s),
    )


def with_overlap(costs: DimCosts, opts: TimeOptions) -> DimCosts:
    """The costs with each dimension's overlap assumption in words (``overlap_text``)."""
    text = overlap_text(opts)
    return DimCosts(*(replace(c, overlap=text[d]) for d, c in costs.by_dimension()))


class RooflineSummary(Struct, frozen=True):
    """The summary row under the roofline model: the step breakdown, bytes per dimension and
    all dimensions, the bubble's share of the step, and a cited measured MFU when there is one."""

    step: StepTime
    dimensions: tuple[DimensionTotal, ...]  # in DIM_ORDER
    send_bytes_per_step: float
    bubble_share_ratio: float
    cited: Cited | None


def roofline_summary(st: StepTime, costs: DimCosts, cited: Cited | None) -> RooflineSummary:
    """The step model's breakdown with the bytes each dimension sends (Σ over dimensions) and
    bubble / step."""
    return RooflineSummary(
        step=st,
        dimensions=dimension_totals(costs),
        send_bytes_per_step=sum(c.send_bytes for c in costs),
        bubble_share_ratio=st.bubble_time_s / st.step_time_s,
        cited=cited,
    )
