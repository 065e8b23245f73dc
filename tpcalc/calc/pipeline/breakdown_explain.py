"""Label, formula and source of every ``PipelineBreakdown`` field (the explain layer beside
``breakdown.py``; the formulas' sources are in ``schedule.py``), and the conversion to the
``Term`` rows ``tpcalc pipeline`` prints."""

from __future__ import annotations

from tpcalc.calc.links.link import LATENCY_FORMULA, Link, latency_inputs, latency_source
from tpcalc.calc.pipeline import schedule as pp
from tpcalc.calc.pipeline.breakdown import (
    SRC_TIMES,
    PipelineActivations,
    PipelineBreakdown,
)
from tpcalc.choices import Schedule
from tpcalc.explain import ACHIEVED_FLOP_PER_S, Explanation, terms
from tpcalc.specs import HardwareSpec
from tpcalc.terms import Scalar, Term, Unit

STEP = "step_time_s"
SCHEDULE_SOURCE = {
    Schedule.gpipe: pp.SRC_GPIPE,
    Schedule.one_f_one_b: pp.SRC_GPIPE,
    Schedule.interleaved: pp.SRC_INTERLEAVED,
    Schedule.zb_h1: pp.SRC_ZB,
    Schedule.dualpipe: pp.SRC_DUALPIPE,
}
BUBBLE_FORMULA = {
    Schedule.gpipe: "(p-1)(F+B+W)",
    Schedule.one_f_one_b: "(p-1)(F+B+W)",
    Schedule.interleaved: "(p-1)(F+B+W)/v",
    Schedule.zb_h1: "(p-1)(F+B-W)",
    Schedule.dualpipe: "(p/2-1)(F&B + (B+W) - 3W), F&B = F+B+W",
}
# The rows ``tpcalc pipeline`` prints, in order (``stage_activation_bytes`` last, when given).
ROWS = (
    "stage_layers", "layers_per_stage_max_count", "stage_params_max", "param_copies_count",
    "p2p_bytes_per_microbatch", "p2p_send_bytes_per_rank", "p2p_time_s", "forward_time_s",
    "backward_input_time_s", "backward_weight_time_s", "compute_time_s", "bubble_time_s",
    STEP, "bubble_ratio", "bubble_share_ratio", "bubble_vs_1f1b_ratio", "in_flight_microbatches",
)  # fmt: skip


def bubble_formula(schedule: Schedule) -> str:
    """The bubble formula of a schedule, as text for --explain (sources in schedule.py)."""
    return BUBBLE_FORMULA[schedule]


def explanations(
    schedule: Schedule, *, link: Link, hw: HardwareSpec, with_latency: bool,
    dualpipe_copies: bool, p2p_divided: bool, times_given: bool, split_by_hand: bool = False,
) -> dict[str, Explanation]:  # fmt: skip
    """The rows of ``PipelineBreakdown``; formulas name the options that shape them."""
    sched_src = SCHEDULE_SOURCE[schedule]
    fbw = "given" if times_given else "2·N_stage·s·b/(t·achieved)"
    split_src = pp.SRC_HAND_SPLIT if split_by_hand else pp.SRC_SPLIT
    return {
        "stage_layers": Explanation(
            "layers per stage", Unit.text,
            "the split set by hand" if split_by_hand else "L over p·v chunks", split_src,
        ),
        "layers_per_stage_max_count": Explanation(
            "layers, most loaded stage", Unit.count, "max over stages", split_src
        ),
        "stage_params_max": Explanation(
            "parameters, most loaded stage", Unit.params,
            "layers + embedding (first) + LM head (last)" + (" ×2" if dualpipe_copies else ""),
            pp.SRC_DUALPIPE if dualpipe_copies else pp.SRC_SPLIT,
        ),
        "param_copies_count": Explanation(
            "parameter copies", Unit.count, "2 for DualPipe, else 1", pp.SRC_DUALPIPE
        ),
        "p2p_bytes_per_microbatch": Explanation(
            "stage-to-stage, per micro-batch", Unit.bytes,
            "s·b·h·dtype" + ("/t" if p2p_divided else ""), pp.SRC_P2P,
        ),
        "p2p_send_bytes_per_rank": Explanation(
            "p2p sent per rank per step", Unit.bytes,
            "2·m·(v) × message (activations forward, gradients back)", pp.SRC_P2P,
        ),
        "p2p_time_s": Explanation(
            f"p2p time on {link.value}", Unit.seconds, f"bytes / bandwidth + {LATENCY_FORMULA}",
            f"{hw.name} {link.value}: alpha-beta model; " + latency_source(hw, with_latency),
        ),
        "forward_time_s": Explanation(
            "F (one micro-batch, one stage)", Unit.seconds, fbw, SRC_TIMES
        ),
        "backward_input_time_s": Explanation(
            "B (grad w.r.t. inputs)", Unit.seconds, fbw, SRC_TIMES
        ),
        "backward_weight_time_s": Explanation(
            "W (grad w.r.t. weights)", Unit.seconds, fbw, SRC_TIMES
        ),
        "compute_time_s": Explanation(
            "useful compute per step", Unit.seconds, "m·(F+B+W)", pp.SRC_GPIPE, STEP
        ),
        "bubble_time_s": Explanation(
            "bubble per step", Unit.seconds, bubble_formula(schedule), sched_src, STEP
        ),
        STEP: Explanation(
            "step (compute + bubble)", Unit.seconds, "m·(F+B+W) + bubble", pp.SRC_GPIPE
        ),
        "bubble_ratio": Explanation(
            "bubble / compute", Unit.ratio, "bubble / (m·(F+B+W))", sched_src
        ),
        "bubble_share_ratio": Explanation(
            "bubble / step", Unit.ratio, "bubble / (bubble + m·(F+B+W))", sched_src
        ),
        "bubble_vs_1f1b_ratio": Explanation(
            "bubble / 1F1B's", Unit.ratio, "bubble / ((p-1)(F+B+W))", sched_src
        ),
        "in_flight_microbatches": Explanation(
            "micro-batches in flight (worst rank)", Unit.count, "in-flight chunks / v",
            pp.SRC_INFLIGHT,
        ),
    }  # fmt: skip


# The inputs ``PipelineBreakdown`` carries for its formulas, explained so every field has text.
INPUTS: dict[str, Explanation] = {
    "num_layers": Explanation("L", Unit.count, "num_hidden_layers (model config)", pp.SRC_SPLIT),
    "p": Explanation("p", Unit.count, "pipeline-parallel size", pp.SRC_SPLIT),
    "m": Explanation("m", Unit.count, "micro-batches per step", pp.SRC_GPIPE),
    "v": Explanation("v", Unit.count, "model chunks per rank", pp.SRC_INTERLEAVED),
    "seq": Explanation("s", Unit.count, "sequence length", pp.SRC_P2P),
    "micro_batch": Explanation("b", Unit.count, "micro-batch size", pp.SRC_P2P),
    "hidden_size": Explanation("h", Unit.count, "hidden_size (model config)", pp.SRC_P2P),
    "tp": Explanation("t", Unit.count, "tensor-parallel size", pp.SRC_P2P),
    "dtype_bytes": Explanation("dtype bytes", Unit.bytes, "--dtype", pp.SRC_P2P),
    "scatter_gather": Explanation(
        "scatter/gather", Unit.text, "--scatter-gather (send 1/t, all-gather after)", pp.SRC_P2P
    ),
    "with_latency": Explanation("latency", Unit.text, "--latency", LATENCY_FORMULA),
    "times_given": Explanation("F, B, W given", Unit.text, "the caller's stage times", SRC_TIMES),
    "split_by_hand": Explanation(
        "stage split set by hand", Unit.text, "first/last stage layers, a layout, or the "
        "accounted split", pp.SRC_HAND_SPLIT,
    ),
    "stage_matmul_params_max": Explanation(
        "N_stage", Unit.params, "max over ranks of the parameters a token multiplies", SRC_TIMES
    ),
    "achieved_flop_per_s": ACHIEVED_FLOP_PER_S,
    "in_flight_chunks": Explanation(
        "in-flight chunks (worst rank)", Unit.count, "in_flight_chunks(schedule, p, m, v, r)",
        pp.SRC_INFLIGHT,
    ),
}  # fmt: skip

ACTIVATION_EXPLANATIONS: dict[str, Explanation] = {
    "stage_activation_bytes": Explanation(
        "activations, most loaded stage", Unit.bytes,
        "in-flight chunks / v × Σ per-layer bytes of its layers", pp.SRC_INFLIGHT,
    ),
    "rank": Explanation("rank", Unit.count, "argmax over ranks", pp.SRC_INFLIGHT),
    "layers": Explanation("layers", Unit.count, "layers on that rank", pp.SRC_SPLIT),
    "in_flight": Explanation(
        "in-flight chunks", Unit.count, "in_flight_chunks on that rank", pp.SRC_INFLIGHT
    ),
    "per_layer_min_bytes": Explanation(
        "smallest layer", Unit.bytes, "min per-layer bytes on that rank", pp.SRC_INFLIGHT
    ),
    "per_layer_max_bytes": Explanation(
        "largest layer", Unit.bytes, "max per-layer bytes on that rank", pp.SRC_INFLIGHT
    ),
}  # fmt: skip


def symbols(b: PipelineBreakdown, hw: HardwareSpec) -> dict[str, dict[str, Scalar]]:
    """The numbers substituted into each formula (shown by --explain)."""
    Lpv: dict[str, Scalar] = {"L": b.num_layers, "p": b.p, "v": b.v}
    fb: dict[str, Scalar] = {
        "p": b.p, "m": b.m, "v": b.v, "F": b.forward_time_s, "B": b.backward_input_time_s,
        "W": b.backward_weight_time_s,
    }  # fmt: skip
    flop_in: dict[str, Scalar] = {} if b.times_given else {
        "N_stage": b.stage_matmul_params_max, "s": b.seq, "b": b.micro_batch, "t": b.tp,
        "achieved": b.achieved_flop_per_s,
    }  # fmt: skip
    return {
        "stage_layers": Lpv,
        "layers_per_stage_max_count": Lpv,
        "stage_params_max": {"p": b.p, "v": b.v},
        "p2p_bytes_per_microbatch": {
            "s": b.seq, "b": b.micro_batch, "h": b.hidden_size, "dtype_bytes": b.dtype_bytes,
            "t": b.tp if b.scatter_gather else 1,
        },
        "p2p_send_bytes_per_rank": {"m": b.m, "v": b.v, "message": b.p2p_bytes_per_microbatch},
        "p2p_time_s": {
            "bytes": b.p2p_send_bytes_per_rank,
            **latency_inputs(hw, b.latency_steps, b.with_latency),
        },
        "forward_time_s": flop_in,
        "backward_input_time_s": flop_in,
        "backward_weight_time_s": flop_in,
        "compute_time_s": fb,
        "bubble_time_s": fb,
        "bubble_ratio": fb,
        "bubble_share_ratio": fb,
        "bubble_vs_1f1b_ratio": fb,
        "in_flight_microbatches": {"p": b.p, "m": b.m, "v": b.v, "chunks": b.in_flight_chunks},
    }  # fmt: skip


def activation_terms(a: PipelineActivations) -> tuple[Term, ...]:
    """The most loaded stage's activations, with the rank and layers it comes from."""
    sym: dict[str, Scalar] = {
        "rank": a.rank, "layers": a.layers, "in_flight": a.in_flight,
        "per_layer_min": a.per_layer_min_bytes, "per_layer_max": a.per_layer_max_bytes,
    }  # fmt: skip
    table = {"stage_activation_bytes": ACTIVATION_EXPLANATIONS["stage_activation_bytes"]}
    return terms(a, table, symbols={"stage_activation_bytes": sym})


def breakdown_terms(b: PipelineBreakdown, hw: HardwareSpec) -> tuple[Term, ...]:
    """The rows of ``tpcalc pipeline`` for one p, in display order; the layers per stage are
    flattened to text ("8,8,8,8") here, at the output edge."""
    table = explanations(
        b.schedule, link=b.link, hw=hw, with_latency=b.with_latency,
        dualpipe_copies=b.param_copies_count > 1, p2p_divided=b.scatter_gather and b.tp > 1,
        times_given=b.times_given, split_by_hand=b.split_by_hand,
    )  # fmt: skip
    sym = symbols(b, hw)
    ex = table["stage_layers"]
    layers = Term(
        key="stage_layers", label=ex.label, value=",".join(map(str, b.stage_layers)),
        unit=ex.unit, formula=ex.formula, source=ex.source, inputs=sym["stage_layers"],
    )  # fmt: skip
    rest = terms(b, {k: table[k] for k in ROWS[1:]}, symbols=sym)
    acts = activation_terms(b.activations) if b.activations is not None else ()
    return (layers, *rest, *acts)
