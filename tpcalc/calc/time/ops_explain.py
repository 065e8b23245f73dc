"""Label, formula and source of every operation's row in ``tpcalc layout --ops`` (the explain
layer of ``step.StepTime.bottleneck_ops``; ``reports.layout.ops_report`` builds the report)."""

from __future__ import annotations

from tpcalc.calc.time.ops import Op, OpKind
from tpcalc.calc.time.step import OpTime
from tpcalc.terms import Term, Unit, term

SRC_OPS = "tpcalc.calc.time.ops (shapes after TP, SP, CP, EP); roofline.op_time_s"


def _mask(op: Op) -> str | None:
    if op.kind is not OpKind.attention:
        return None
    return "causal" if op.causal else "none"


# the table's legend for its short shape headers (``reports.layout.ops_report``)
OPS_LEGEND = (
    "M, N, K: a GEMM's rows, columns and reduction; attention: query block, keys, head dim. "
    "groups: experts or heads run at once. mask: the attention's (causal or none). Memory-bound "
    "elementwise ops (norms, activations, residuals, permutes) have none of these: —."
)


def op_terms(ot: OpTime) -> tuple[Term, ...]:
    """Shape, work, bound and time of one op (per micro-batch, per layer it runs in)."""
    op = ot.op
    shaped = op.kind is not OpKind.memory  # a GEMM or attention; elementwise work has no M, N, K
    rate = op.flop / ot.time_s if shaped and ot.time_s else None
    traffic = op.bytes / ot.time_s if ot.time_s else 0.0
    bound = "compute" if ot.compute_bound else "memory"
    return (
        term("m", "M", op.m if shaped else None, Unit.count,
             formula="rows (attention: the query block)", source=SRC_OPS),
        term("n", "N", op.n if shaped else None, Unit.count,
             formula="columns (attention: the keys)", source=SRC_OPS),
        term("k", "K", op.k if shaped else None, Unit.count,
             formula="reduction (attention: the head dim)", source=SRC_OPS),
        term("groups", "groups", op.groups if shaped else None, Unit.count,
             formula="experts or heads run at once", source=SRC_OPS),
        term("mask", "mask", _mask(op), Unit.text,
             formula="causal: no CP, or CP's diagonal ring step; none: CP's other steps or a "
             "non-causal model", source="Transformer Engine context_parallel.py (CP sections)"),
        term("flop", "FLOP", op.flop, Unit.flop, formula="2·M·N·K·groups (GEMM)",
             source="Narayanan et al. 2021 §5.1; Dao 2023 (attention)"),
        term("bytes", "HBM bytes", op.bytes, Unit.bytes, formula="operands + result",
             source=SRC_OPS),
        term("bound", "bound", bound, Unit.text, formula="max(compute, memory) roofline",
             source="Williams et al. 2009"),
        term("achieved_flop_per_s", "achieved FLOP/s", rate, Unit.flop_per_s,
             formula="FLOP / time", source="roofline.op_time_s"),
        term("achieved_bytes_per_s", "achieved HBM bytes/s", traffic, Unit.bytes_per_s,
             formula="bytes / time", source="roofline.op_time_s"),
        term("time_s", "time per layer", ot.time_s, Unit.seconds,
             formula="max(FLOP / (peak · eff), bytes / (HBM · eff))", source="roofline.op_time_s"),
        term("stage_time_s", "time on the stage", ot.time_s * ot.count, Unit.seconds,
             formula="time per layer · layers", source=SRC_OPS),
    )  # fmt: skip
