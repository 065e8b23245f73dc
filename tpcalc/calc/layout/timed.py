"""A layout's step under the per-operation model: the dimension rows' times and the summary.

``calc.layout.report`` prices a layout's bytes per dimension (``calc.layout.comm``); with the
roofline time model (the default) the time and the exposed part of each dimension, and the step
breakdown, come from ``calc.time.step`` instead, and every modelling choice is echoed as an input.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from tpcalc.calc.layout.comm import DimCost
from tpcalc.calc.time.explain import STEP_EXPLANATIONS
from tpcalc.calc.time.pipeline_layout import layers_text
from tpcalc.calc.time.step import StepTime, TimeOptions
from tpcalc.explain import terms
from tpcalc.specs import HardwareSpec
from tpcalc.terms import Scalar, Term, Unit, term

if TYPE_CHECKING:  # report.py imports this module
    from tpcalc.calc.layout.report import Cited

ROOFLINE_COMM = (
    "Σ collectives: NCCL base + ring steps · α + bytes sent / busbw (k NICs across nodes)",
    "tpcalc.calc.time.roofline.collective_time_s; the card's performance block",
)
SRC_DIMS = "tpcalc.calc.layout.comm: bytes each rank sends per step, per dimension"
DIMS = ("tp", "cp", "pp", "dp", "ep")


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
        "pp": said(ov.pp_p2p, "steady state hidden; fill and drain exposed", "exposed"),
        "dp": said(
            ov.dp_grad_reduce and ov.dp_param_gather,
            "buckets under the backward drain and the forward fill",
            "exposed (--no-dp-overlap)",
        ),
    }


def time_inputs(hw: HardwareSpec, opts: TimeOptions) -> dict[str, Scalar]:
    """Every assumption of the step-time model, as row inputs (table, JSON and CSV)."""
    ov = opts.overlap
    scale = hw.performance.fitted.compute_scale.value if hw.performance else None
    return {
        "time_model": "roofline",
        "tp_comm_overlap": ov.tp_comm,
        "cp_overlap": ov.cp_ring,
        "ep_overlap": "auto" if ov.ep_a2a is None else ov.ep_a2a,
        "pp_overlap": ov.pp_p2p,
        "dp_overlap": ov.dp_grad_reduce and ov.dp_param_gather,
        "causal": opts.causal,
        "attention_flops": "causal" if opts.causal_model_flops else "full",
        "fused_sinks": opts.fused_sinks,
        "first_stage_layers": opts.first_stage_layers,
        "last_stage_layers": opts.last_stage_layers,
        "recompute_layers": opts.recompute_layers,
        "ep_dispatch": "node-aware" if opts.ep_node_dedup else "all-to-all",
        "stage_layers": layers_text(opts.chunk_layers) if opts.chunk_layers else "even",
        "compute_scale": scale,
    }


def roofline_costs(costs: dict[str, DimCost], st: StepTime) -> dict[str, DimCost]:
    """Each dimension's bytes as priced, its time and exposed time from the step model."""
    timed = {
        "tp": (st.tp_comm_time_s, st.tp_exposed_time_s),
        "cp": (st.cp_comm_time_s, st.cp_exposed_time_s),
        "ep": (st.ep_comm_time_s, st.ep_exposed_time_s),
        "pp": (st.pp_comm_time_s, st.pp_exposed_time_s),
        "dp": (st.dp_comm_time_s, st.dp_exposed_time_s),
    }
    return {d: replace(costs[d], time_s=timed[d][0], exposed_s=timed[d][1]) for d in costs}


def with_overlap(costs: dict[str, DimCost], opts: TimeOptions) -> dict[str, DimCost]:
    """The costs with each dimension's overlap assumption in words (``overlap_text``)."""
    text = overlap_text(opts)
    return {d: replace(c, overlap=text[d]) for d, c in costs.items()}


def roofline_summary(st: StepTime, costs: dict[str, DimCost], cited: Cited | None) -> list[Term]:
    """The summary row: the step breakdown (parts add up to step_time_s), throughput, MFU,
    HFU, bytes per dimension, and a cited measured MFU when a source gives one."""
    out = list(terms(st, STEP_EXPLANATIONS))
    for d in DIMS:
        out.append(
            term(f"{d}_send_bytes_per_step", f"{d.upper()} sent", costs[d].send_bytes,
                 Unit.bytes, formula=f"{d} row: send_bytes_per_step", source=SRC_DIMS,
                 part_of="send_bytes_per_step")
        )  # fmt: skip
    out += [
        term("send_bytes_per_step", "sent per rank per step, all dimensions",
             sum(c.send_bytes for c in costs.values()), Unit.bytes,
             formula="Σ over tp, cp, pp, dp, ep of send_bytes_per_step", source=SRC_DIMS),
        term("bubble_share_ratio", "bubble / step", st.bubble_time_s / st.step_time_s,
             Unit.ratio, formula="bubble_time / step_time", source=STEP_EXPLANATIONS[
                 "bubble_time_s"].source),
    ]  # fmt: skip
    if cited is not None:
        out.append(
            term("mfu_cited_ratio", "MFU (cited, measured)", cited.mfu, Unit.ratio,
                 formula="measured, as cited", source=cited.source)
        )  # fmt: skip
    return out
