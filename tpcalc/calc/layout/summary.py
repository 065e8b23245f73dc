"""The summary row of ``tpcalc layout --time-model fixed``: the step as m micro-batches of the
slowest stage + the pipeline bubble + every dimension's exposed communication (Narayanan et al.
2021 §2.2), and an MFU estimate (Chowdhery et al. 2022 App. B). Labels, formulas and sources:
``tpcalc.calc.layout.summary_explain``."""

from __future__ import annotations

from msgspec import Struct

from tpcalc.calc.layout.comm import DimCosts
from tpcalc.calc.layout.compute import mfu_peak, model_flop_per_step
from tpcalc.calc.layout.groups import LayoutRun, ParallelLayout
from tpcalc.specs import HardwareSpec, ModelSpec

DIM_ORDER = DimCosts._fields  # ("tp", "cp", "pp", "dp", "ep"): the rows' order


class Cited(Struct, frozen=True):
    """A measured figure a source reports for this layout (shown, never computed)."""

    mfu: float
    source: str


class DimensionTotal(Struct, frozen=True):
    """One dimension's share of the step: its exposed time and its bytes per rank."""

    dimension: str
    exposed_time_s: float
    send_bytes_per_step: float


def dimension_totals(costs: DimCosts) -> tuple[DimensionTotal, ...]:
    """Each dimension's exposed time and bytes, in ``DIM_ORDER``."""
    return tuple(DimensionTotal(d, c.exposed_s, c.send_bytes) for d, c in costs.by_dimension())


class FixedStepSummary(Struct, frozen=True):
    """The summary row under ``--time-model fixed``: step = compute + bubble + Σ exposed, and
    MFU against the card's peak. Labels, formulas, sources: ``report_explain``."""

    # inputs the formulas substitute
    seq: int
    micro_batch: int
    microbatches: int
    dp: int
    pp: int
    vpp: int
    world: int
    schedule: str
    dtype: str
    micro_batch_time_s: float
    peak_dtype: str
    peak_source: str
    # the result
    tokens_per_step: int
    compute_time_s: float
    bubble_time_s: float
    dimensions: tuple[DimensionTotal, ...]  # in DIM_ORDER
    exposed_time_s: float
    step_time_s: float
    send_bytes_per_step: float
    bubble_share_ratio: float
    model_flop_per_step: float
    achieved_flop_per_s: float
    peak_flop_per_s: float
    mfu_estimate_ratio: float
    cited: Cited | None  # a measured MFU a source reports, shown beside the estimate


def fixed_step_summary(
    spec: ModelSpec, hw: HardwareSpec, lay: ParallelLayout, run: LayoutRun,
    costs: DimCosts, mb_s: float, bubble: float, cited: Cited | None,
) -> FixedStepSummary:  # fmt: skip
    """m micro-batches of the slowest stage + the bubble + every dimension's exposed time
    (``summary_explain.SRC_STEP``); MFU = model FLOP / (world · peak · step) (``SRC_MFU``)."""
    m = run.microbatches
    compute = m * mb_s
    dims = dimension_totals(costs)
    exposed = sum(x.exposed_time_s for x in dims)
    step_s = compute + bubble + exposed
    model_flop = model_flop_per_step(
        spec, lay, seq=run.seq, micro_batch=run.micro_batch, microbatches=m
    )
    peak, peak_dtype, peak_src = mfu_peak(hw, run.dtype)
    return FixedStepSummary(
        seq=run.seq, micro_batch=run.micro_batch, microbatches=m, dp=lay.dp, pp=lay.pp,
        vpp=run.vpp, world=lay.world, schedule=run.schedule.value, dtype=run.dtype.value,
        micro_batch_time_s=mb_s, peak_dtype=peak_dtype, peak_source=peak_src,
        tokens_per_step=run.seq * run.micro_batch * m * lay.dp,
        compute_time_s=compute,
        bubble_time_s=bubble,
        dimensions=dims,
        exposed_time_s=exposed,
        step_time_s=step_s,
        send_bytes_per_step=sum(c.send_bytes for c in costs),
        bubble_share_ratio=bubble / step_s,
        model_flop_per_step=model_flop,
        achieved_flop_per_s=hw.achieved_flop_per_s.value,
        peak_flop_per_s=peak,
        mfu_estimate_ratio=model_flop / (lay.world * peak * step_s),
        cited=cited,
    )  # fmt: skip
