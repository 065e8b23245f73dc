"""Label, formula and source of ``RooflineSummary`` (the explain layer beside ``timed.py``) and
the text naming the model that times each dimension under ``--time-model roofline``."""

from __future__ import annotations

from tpcalc.calc.layout.summary_explain import SRC_DIMS, cited_terms, dimension_terms
from tpcalc.calc.layout.timed import RooflineSummary
from tpcalc.calc.time.explain import STEP_EXPLANATIONS
from tpcalc.explain import Explanation, terms
from tpcalc.terms import Term, Unit

# (formula, source) of every dimension's comm_time_s under the roofline model.
ROOFLINE_COMM = (
    "Σ collectives: NCCL base + ring steps · α + bytes sent / busbw (k NICs across nodes)",
    "tpcalc.calc.time.roofline.collective_time_s; the card's performance block",
)

EXPLANATIONS = {
    "send_bytes_per_step": Explanation(
        "sent per rank per step, all dimensions", Unit.bytes,
        "Σ over tp, cp, pp, dp, ep of send_bytes_per_step", SRC_DIMS,
    ),
    "bubble_share_ratio": Explanation(
        "bubble / step", Unit.ratio, "bubble_time / step_time",
        STEP_EXPLANATIONS["bubble_time_s"].source,
    ),
}  # fmt: skip


def roofline_summary_terms(s: RooflineSummary) -> list[Term]:
    """The summary row: the step breakdown (parts add up to step_time_s), throughput, MFU,
    HFU, bytes per dimension, and a cited measured MFU when a source gives one."""
    out = [
        *terms(s.step, STEP_EXPLANATIONS),
        *dimension_terms(s.dimensions, "send_bytes_per_step"),
        *terms(s, EXPLANATIONS),
    ]
    return out + cited_terms(s.cited)
