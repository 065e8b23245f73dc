"""Label, formula and source of every ``FixedStepSummary`` field (the explain layer beside
``summary.py``), and the conversion to the summary rows of ``tpcalc layout --time-model fixed``;
the per-dimension parts are flattened to ``{d}_exposed_time_s`` / ``{d}_send_bytes_per_step``
here, at the output edge."""

from __future__ import annotations

from msgspec.structs import replace

from tpcalc.calc.layout.compute import SRC_FLOP, SRC_MFU
from tpcalc.calc.layout.summary import Cited, DimensionTotal, FixedStepSummary
from tpcalc.explain import Explanation, terms
from tpcalc.specs import HardwareSpec
from tpcalc.terms import Scalar, Term, Unit

SRC_TOKENS = "Narayanan et al. 2021 §2: global batch = micro-batch · micro-batches · dp sequences"
SRC_STEP = (
    "Narayanan et al. 2021 §2.2 (step = m micro-batches + pipeline bubble) plus the exposed "
    "communication of every dimension (tpcalc.calc.layout.comm overlap assumptions)"
)
SRC_OVERLAP = "tpcalc.calc.layout.comm.OVERLAP: the named overlap assumption of each dimension"
SRC_DIMS = "tpcalc.calc.layout.comm: bytes each rank sends per step, per dimension"
STEP = "step_time_s"
SEND = "send_bytes_per_step"
HEAD = ("tokens_per_step", "compute_time_s", "bubble_time_s")
TAIL = (
    STEP, SEND, "bubble_share_ratio", "model_flop_per_step", "achieved_flop_per_s",
    "peak_flop_per_s", "mfu_estimate_ratio",
)  # fmt: skip


def explanations(
    schedule: str, peak_dtype: str, peak_source: str, hw: HardwareSpec
) -> dict[str, Explanation]:
    """The explain table of ``FixedStepSummary``: the schedule names the bubble, the dtype the
    peak that MFU divides by."""
    return {
        "tokens_per_step": Explanation("tokens per step", Unit.count, "s·b·m·dp", SRC_TOKENS),
        "compute_time_s": Explanation(
            "compute (slowest stage)", Unit.seconds, "m · stage FLOP / achieved FLOP/s",
            SRC_FLOP, STEP,
        ),
        "bubble_time_s": Explanation(
            "pipeline bubble", Unit.seconds,
            f"bubble of {schedule} with F,B,W of the slowest stage",
            "tpcalc.calc.pipeline.schedule.bubble_time_s", STEP,
        ),
        "exposed_time_s": Explanation(
            "exposed communication", Unit.seconds, "Σ over dimensions of exposed_time_s",
            SRC_OVERLAP,
        ),
        STEP: Explanation(
            "step time (estimate)", Unit.seconds, "compute + bubble + Σ exposed communication",
            SRC_STEP,
        ),
        SEND: Explanation(
            "sent per rank per step, all dimensions", Unit.bytes,
            "Σ over tp, cp, pp, dp, ep of send_bytes_per_step", SRC_DIMS,
        ),
        "bubble_share_ratio": Explanation(
            "bubble / step", Unit.ratio, "bubble_time / step_time", SRC_STEP
        ),
        "model_flop_per_step": Explanation(
            "model FLOP per step", Unit.flop, "6·N_active·tokens + attention (no recompute)",
            SRC_MFU,
        ),
        "achieved_flop_per_s": Explanation(
            "achieved FLOP/s (assumption)", Unit.flop_per_s, "hardware config",
            hw.achieved_flop_per_s.source,
        ),
        "peak_flop_per_s": Explanation(
            f"peak {peak_dtype.upper()} per GPU", Unit.flop_per_s,
            f"hardware config: peak_{peak_dtype}_flop_per_s", peak_source,
        ),
        "mfu_estimate_ratio": Explanation(
            "MFU (estimate)", Unit.ratio, "model FLOP / (world · peak · step time)", SRC_MFU
        ),
    }  # fmt: skip


# The inputs ``FixedStepSummary`` carries for its formulas, explained so every field has text.
INPUTS: dict[str, Explanation] = {
    "seq": Explanation("s", Unit.count, "sequence length", SRC_TOKENS),
    "micro_batch": Explanation("b", Unit.count, "micro-batch size", SRC_TOKENS),
    "microbatches": Explanation("m", Unit.count, "micro-batches per step", SRC_TOKENS),
    "dp": Explanation("dp", Unit.count, "data-parallel size", SRC_TOKENS),
    "pp": Explanation("p", Unit.count, "pipeline-parallel size", SRC_STEP),
    "vpp": Explanation("v", Unit.count, "model chunks per rank", SRC_STEP),
    "world": Explanation("world", Unit.count, "tp·cp·pp·dp", SRC_MFU),
    "schedule": Explanation("schedule", Unit.text, "--schedule", SRC_STEP),
    "dtype": Explanation("dtype", Unit.text, "--dtype (the peak MFU divides by)", SRC_MFU),
    "micro_batch_time_s": Explanation(
        "one micro-batch, slowest stage", Unit.seconds, "stage FLOP / achieved FLOP/s", SRC_FLOP
    ),
    "peak_dtype": Explanation("peak dtype", Unit.text, "fp8 for FP8 matmuls, else bf16", SRC_MFU),
    "peak_source": Explanation("peak source", Unit.text, "hardware config", SRC_MFU),
}  # fmt: skip

DIMENSION_EXPLANATIONS: dict[str, Explanation] = {
    "dimension": Explanation("dimension", Unit.text, "tp, cp, pp, dp or ep", SRC_DIMS),
    "exposed_time_s": Explanation(
        "exposed", Unit.seconds, "the dimension row's exposed_time_s", SRC_OVERLAP, STEP
    ),
    "send_bytes_per_step": Explanation(
        "sent", Unit.bytes, "the dimension row's send_bytes_per_step", SRC_DIMS, SEND
    ),
}


def dimension_terms(dims: tuple[DimensionTotal, ...], field: str) -> list[Term]:
    """``{d}_{field}`` for every dimension, each a part of the step or of the bytes sent."""
    ex = DIMENSION_EXPLANATIONS[field]
    label = {"exposed_time_s": "exposed", "send_bytes_per_step": "sent"}[field]
    out = []
    for d in dims:
        name = d.dimension
        table = {field: Explanation(f"{name.upper()} {label}", ex.unit,
                                    f"{name} row: {field}", ex.source, ex.part_of)}  # fmt: skip
        (row,) = terms(d, table)
        out.append(replace(row, key=f"{name}_{field}"))
    return out


def cited_terms(cited: Cited | None) -> list[Term]:
    """The measured MFU a source cites for this layout (shown beside the estimate, never
    computed), or nothing."""
    if cited is None:
        return []
    return [
        Term(
            key="mfu_cited_ratio", label="MFU (cited, measured)", value=cited.mfu,
            unit=Unit.ratio, formula="measured, as cited", source=cited.source,
        )
    ]  # fmt: skip


def fixed_summary_terms(s: FixedStepSummary, hw: HardwareSpec) -> list[Term]:
    """The summary rows in display order: tokens, compute, bubble, every dimension's exposed
    time and bytes, the step, MFU, and the cited MFU when a source gives one."""
    table = explanations(s.schedule, s.peak_dtype, s.peak_source, hw)
    symbols: dict[str, dict[str, Scalar]] = {
        "tokens_per_step": {"s": s.seq, "b": s.micro_batch, "m": s.microbatches, "dp": s.dp},
        "compute_time_s": {
            "m": s.microbatches, "micro_batch_time_s": s.micro_batch_time_s,
            "achieved_flop_per_s": s.achieved_flop_per_s,
        },
        "bubble_time_s": {"p": s.pp, "m": s.microbatches, "v": s.vpp},
        STEP: {
            "compute_time_s": s.compute_time_s, "bubble_time_s": s.bubble_time_s,
            "exposed_time_s": s.exposed_time_s,
        },
        "bubble_share_ratio": {"bubble_time_s": s.bubble_time_s, "step_time_s": s.step_time_s},
        "peak_flop_per_s": {"dtype": s.dtype},
        "mfu_estimate_ratio": {
            "world": s.world, "peak_flop_per_s": s.peak_flop_per_s, "peak_dtype": s.peak_dtype,
            "step_time_s": s.step_time_s,
        },
    }  # fmt: skip
    out = [
        *terms(s, {k: table[k] for k in HEAD}, symbols=symbols),
        *dimension_terms(s.dimensions, "exposed_time_s"),
        *dimension_terms(s.dimensions, "send_bytes_per_step"),
        *terms(s, {k: table[k] for k in TAIL}, symbols=symbols),
    ]
    return out + cited_terms(s.cited)
