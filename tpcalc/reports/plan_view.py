"""``tpcalc plan``'s output: a ``PlanResult`` as Reports (top k, Pareto front, counts, every
feasible layout) and the chosen layout as ``tpcalc layout`` prices and explains it.

The planner (``tpcalc.calc.plan``) returns typed candidates; this module only arranges their
fields into rows (``tpcalc.render`` formats them) and maps a candidate back onto the options of
``tpcalc layout`` so ``--explain`` is that command's explanation, number for number.
"""

from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING

from msgspec.structs import replace

from tpcalc.calc.layout.memory import RANK_TOTAL_FORMULA
from tpcalc.terms import Report, Row, Scalar, Term, Unit, term
from tpcalc.units import GB

if TYPE_CHECKING:
    from tpcalc.calc.layout.groups import MemoryTechniques
    from tpcalc.calc.plan.types import Candidate, PlanResult

SRC_PLAN = "tpcalc.calc.plan: the candidate priced by rank_memory and step_time, as tpcalc layout"
SRC_STEP = "tpcalc.calc.time.step.step_time (tpcalc layout's step model)"
SRC_MEM = "tpcalc.calc.layout.memory.rank_memory: the most loaded pipeline rank"
SRC_COUNTS = "tpcalc.calc.plan search bookkeeping: enumerated = feasible + Σ rejected"


def layout_text(c: Candidate) -> str:
    """A candidate's layout on one line: sizes, micro-batching, ZeRO, recompute, schedule."""
    lay, run = c.layout, c.run
    text = (
        f"TP{lay.tp} CP{lay.cp} PP{lay.pp} DP{lay.dp}"
        + (f" EP{lay.ep}" if lay.ep > 1 else "")
        + (f" ETP{lay.etp}" if lay.etp > 1 else "")
        + (f" VP{run.vpp}" if run.vpp > 1 else "")
        + f" mbs{run.micro_batch} m{run.microbatches} ZeRO-{int(lay.zero)}"
        + f" {run.recompute.value}"
    )
    if run.memory.recompute_modules:
        text += "+" + ",".join(run.memory.recompute_modules)
    if lay.pp > 1:
        text += f" {run.schedule.value}"
    return text


def candidate_inputs(c: Candidate) -> dict[str, Scalar]:
    """Every searched choice of a candidate, one flat mapping (the JSON/CSV columns)."""
    lay, run, ov = c.layout, c.run, c.options.overlap
    return {
        "tp": lay.tp, "cp": lay.cp, "pp": lay.pp, "dp": lay.dp, "ep": lay.ep, "etp": lay.etp,
        "vpp": run.vpp, "micro_batch": run.micro_batch, "microbatches": run.microbatches,
        "zero": int(lay.zero), "recompute": run.recompute.value,
        "recompute_modules": ",".join(run.memory.recompute_modules) or "none", "sp": run.sp,
        "schedule": run.schedule.value, "tp_comm_overlap": ov.tp_comm, "cp_overlap": ov.cp_ring,
        "ep_overlap": ov.ep_a2a, "pp_overlap": ov.pp_p2p,
        "dp_overlap": ov.dp_grad_reduce and ov.dp_param_gather,
    }  # fmt: skip


def dominant(c: Candidate) -> str:
    """The largest part of a candidate's step, by name ('gemm', 'bubble', 'tp exposed')."""
    return c.dominant_part.removesuffix("_time_s").replace("_", " ")


def candidate_terms(c: Candidate, *, compact: bool) -> tuple[Term, ...]:
    """Per-rank memory against the card, step time, tokens/s/GPU, MFU and the time of the part
    that dominates (the card itself only in JSON/CSV: the share says it in the table)."""
    card = (
        term("card_memory_bytes", "card", c.card_memory_bytes, Unit.bytes,
             formula="hardware config", source="hardware config memory_bytes"),
        term("capacity_bytes", "usable (after headroom)", c.capacity_bytes, Unit.bytes,
             formula="card · (1 − headroom) − reserve", source=SRC_PLAN),
    )  # fmt: skip
    return (
        term("memory_bytes_per_rank", "memory per rank", c.memory_bytes, Unit.bytes,
             formula=f"{RANK_TOTAL_FORMULA} of the most loaded rank", source=SRC_MEM,
             worst_pp_rank=c.worst_pp_rank),
        *(() if compact else card),
        term("memory_share_ratio", "of card", c.memory_fraction, Unit.ratio,
             formula="memory per rank / card", source=SRC_MEM),
        term("step_time_s", "step time", c.step_time_s, Unit.seconds,
             formula="Σ parts of the step", source=SRC_STEP),
        term("tokens_per_s_per_gpu", "tokens/s/GPU", c.tokens_per_s_per_gpu, Unit.count,
             formula="tokens per step / step time / GPUs", source=SRC_STEP),
        term("mfu_ratio", "MFU", c.mfu_ratio, Unit.ratio,
             formula="model FLOP/s / peak of the GEMM dtype", source=SRC_STEP),
        term("dominant_time_s", "dominant part", c.dominant_time_s, Unit.seconds,
             formula="the largest part of the step", source=SRC_STEP),
    )  # fmt: skip


def _shared(result: PlanResult) -> dict[str, Scalar]:
    req = result.request
    return {
        "model": req.spec.name, "hardware": req.hw.name, "gpus": result.gpus, "seq": req.seq,
        "global_batch": req.global_batch, "objective": req.objective.value,
        # the memory budget's inputs (--memory-headroom, --reserve-gb): every fit is against it
        "memory_headroom_ratio": req.memory_headroom, "reserve_bytes": req.reserve_bytes,
        "embedding_in_split": req.time_options.embedding_in_split,
        "loss_in_split": req.time_options.loss_in_split,
        "moe_dispatcher": req.memory.moe_dispatcher,
        "ep_dispatch": "node-aware" if req.time_options.ep_node_dedup else "all-to-all",
        "dropout": req.memory.echo()["dropout"],
        "attention": req.memory.attention, "loss_kernel": req.memory.loss_kernel,
        # how the experts are weighted decides whether each expert output is kept (MoE only)
        **({"moe_probs_in_act": req.memory.moe_probs_in_act} if req.spec.is_moe else {}),
    }  # fmt: skip


def candidates_report(
    result: PlanResult,
    candidates: tuple[Candidate, ...],
    title: str,
    *,
    compact: bool,
    index: str = "rank",
) -> Report:
    """One row per candidate, ranked; ``compact`` keeps the layout as one text column (the
    table), otherwise every choice is its own column (JSON, CSV)."""
    shared = _shared(result)
    rows = []
    for rank, c in enumerate(candidates, start=1):
        inputs: dict[str, Scalar] = {
            index: rank, "layout": layout_text(c), "dominated_by": dominant(c), **shared
        }  # fmt: skip
        if not compact:
            inputs.update(candidate_inputs(c))
        rows.append(Row(inputs=inputs, terms=candidate_terms(c, compact=compact)))
    return Report(title=title, rows=tuple(rows))


def top_report(result: PlanResult, *, compact: bool = True) -> Report:
    req = result.request
    title = (
        f"Best {len(result.top)} layouts for {req.spec.name} on {result.gpus:,} × {req.hw.name} "
        f"(seq {req.seq:,}, global batch {req.global_batch:,}; by {req.objective.value})"
    )
    report = candidates_report(result, result.top, title, compact=compact)
    notes = tuple(n for n in (result.why_best, moe_extrapolation(result), tight_fit(result)) if n)
    return replace(report, notes=notes, warnings=no_layout(result))


def moe_extrapolation(result: PlanResult) -> str | None:
    """A caution where the best layout's MoE overhead comes from the card's fitted per-layer
    constant (``fitted.moe_layer_overhead_s``) at a micro-batch outside the tokens per rank of
    the runs it was fitted on (``fitted.moe_fit_tokens``): below them the constant is taken per
    pass as fitted, above them it grows with the tokens (``roofline.moe_layer_overhead``);
    either is an assumption the fitted runs do not test."""
    best, req = result.best, result.request
    perf = req.hw.performance
    if best is None or perf is None or perf.fitted.moe_fit_tokens is None:
        return None
    fit, over = perf.fitted.moe_fit_tokens, best.step.moe_overhead_time_s
    tokens = best.run.seq * best.run.micro_batch // best.layout.cp
    if not over or fit.low <= tokens <= fit.high:
        return None
    seen = f"{fit.low:,}" if fit.low == fit.high else f"{fit.low:,}-{fit.high:,}"
    how = (
        f"taken to grow with the tokens beyond {fit.high:,}" if tokens > fit.high
        else "extrapolated as the fitted per-layer constant"
    )  # fmt: skip
    return (
        f"the best runs {tokens:,} tokens per micro-batch per rank; {req.hw.name}'s MoE overhead "
        f"constant was fitted on runs of {seen}, so its {over:.2f} s of MoE overhead "
        f"({over / best.step_time_s:.0%} of the step) is {how}"
    )


# The share of the card above which a best layout that keeps no room free gets a note: a
# display threshold, not a hardware figure (what the CUDA context, NCCL's buffers and the caching
# allocator take varies by stack; tpcalc counts none of them).
NEAR_FULL_RATIO = 0.95


def tight_fit(result: PlanResult) -> str | None:
    """A note when the best fills the card past ``NEAR_FULL_RATIO`` and the request keeps no
    room free (no --memory-headroom, no --reserve-gb, the defaults)."""
    best, req = result.best, result.request
    if best is None or req.memory_headroom or req.reserve_bytes:
        return None
    if best.memory_fraction <= NEAR_FULL_RATIO:
        return None
    return (
        f"the best fills {best.memory_fraction:.1%} of the card with no room kept free: the CUDA "
        "context, NCCL's buffers and the allocator's fragmentation are not counted; "
        "--memory-headroom 0.1 or --reserve-gb 4 plans with room for them"
    )


def no_layout(result: PlanResult) -> tuple[str, ...]:
    """Why nothing came out: the rejections, and when memory turned every layout that divides
    down, how far the closest is from the card (``PlanResult.memory_floor_bytes``, a lower
    bound) and what frees memory."""
    if result.top:
        return ()
    reasons = ", ".join(f"{why} {n:,}" for why, n in result.rejections) or "none enumerated"
    line = f"no feasible layout among {result.enumerated:,} (rejected: {reasons})"
    usable = result.request.capacity_bytes
    if not result.feasible and usable < result.memory_floor_bytes < math.inf:
        line += (
            f"; every layout that divides needs at least {result.memory_floor_bytes / GB:,.1f} "
            f"GB per rank, {usable / GB:,.1f} GB usable: try more GPUs, --offload-layers, or "
            "less --memory-headroom and --reserve-gb"
        )
    return (line,)


def spread(points: tuple[Candidate, ...], most: int) -> tuple[Candidate, ...]:
    """At most ``most`` points of a front, evenly spaced by position, both ends kept."""
    n = len(points)
    if n <= most:
        return points
    if most < 2:
        return points[-1:]
    picks = sorted({round(i * (n - 1) / (most - 1)) for i in range(most)})
    return tuple(points[i] for i in picks)


def pareto_report(result: PlanResult, most: int = 10) -> Report:
    """The memory-versus-time front, less memory first: every point, or ``most`` of them evenly
    spread (the note says how many there are)."""
    shown = spread(result.pareto, most)
    within = result.request.pareto_within
    reach = f"; up to {within:g}× the best step, --pareto-within" if math.isfinite(within) else ""
    title = f"Memory versus step time: the Pareto front (less memory first, each one faster{reach})"
    report = candidates_report(result, shown, title, compact=True, index="point")
    if len(shown) < len(result.pareto):
        note = (
            f"{len(shown)} of the front's {len(result.pareto)} layouts shown, evenly spread; "
            "--all --format csv lists every feasible layout"
        )
        report = replace(report, notes=(note,))
    return report


def all_report(result: PlanResult) -> Report:
    """Every feasible layout (``--all``), every choice its own column."""
    return candidates_report(
        result, result.all_feasible, f"All {len(result.all_feasible):,} feasible layouts",
        compact=False,
    )  # fmt: skip


def counts_report(result: PlanResult) -> Report:
    """Layouts evaluated, feasible, and rejected per reason (they add up to the evaluated)."""
    total = "layouts_evaluated"
    terms: list[Term] = [
        term(total, "layouts evaluated", result.enumerated, Unit.count, formula="search grid",
             source=SRC_COUNTS),
        term("layouts_feasible", "feasible", result.feasible, Unit.count,
             formula="divide, fit the memory budget, make the global batch", source=SRC_COUNTS,
             part_of=total),
    ]  # fmt: skip
    for i, (why, n) in enumerate(result.rejections):
        terms.append(
            term(f"rejected_{i}_count", f"rejected: {why}", n, Unit.count,
                 formula="layouts turned down for this reason", source=SRC_COUNTS, part_of=total)
        )  # fmt: skip
    terms.append(
        term("timed_exactly", "timed exactly (step model calls)", result.timed_exactly,
             Unit.count, formula="candidates not pruned by a lower bound", source=SRC_COUNTS)
    )  # fmt: skip
    return Report(
        title="How the search went", rows=(Row(inputs=_shared(result), terms=tuple(terms)),)
    )


def layout_args(model: str, hardware: str, c: Candidate) -> list[str]:
    """The ``tpcalc layout`` arguments that price ``c`` exactly (same layout, run, options)."""
    lay, run, opt = c.layout, c.run, c.options
    ov = opt.overlap
    args = [
        "-m", model, "--hardware", hardware, "--tp", str(lay.tp), "--cp", str(lay.cp),
        "--pp", str(lay.pp), "--dp", str(lay.dp), "--ep", str(lay.ep), "--etp", str(lay.etp),
        "--zero", str(int(lay.zero)), "--gpus-per-node", str(lay.gpus_per_node),
        "--seq", str(run.seq), "--micro-batch", str(run.micro_batch),
        "--microbatches", str(run.microbatches), "--vpp", str(run.vpp),
        "--schedule", run.schedule.value, "--state-recipe", run.recipe.value,
        "--sp" if run.sp else "--no-sp", "--recompute", run.recompute.value,
        "--activations", run.activations.value, "--dtype", run.dtype.value,
        "--tp-comm-overlap" if ov.tp_comm else "--no-tp-comm-overlap",
        "--dp-overlap" if ov.dp_grad_reduce else "--no-dp-overlap",
        "--cp-overlap" if ov.cp_ring else "--no-cp-overlap",
        "--latency" if run.with_latency else "--no-latency",
    ]  # fmt: skip
    if ov.ep_a2a is not None:
        args.append("--ep-overlap" if ov.ep_a2a else "--no-ep-overlap")
    if not ov.pp_p2p:
        args.append("--no-pp-overlap")
    if opt.pp_scatter_gather:
        args.append("--pp-scatter-gather")
    if run.memory.recompute_modules:
        args += ["--recompute-modules", ",".join(run.memory.recompute_modules)]
    args += technique_args(run.memory)
    if opt.recompute_layers is not None:
        args += ["--recompute-layers", str(opt.recompute_layers)]
    if opt.embedding_in_split:
        args.append("--account-for-embedding-in-pipeline-split")
    if opt.loss_in_split:
        args.append("--account-for-loss-in-pipeline-split")
    return args


def technique_args(memory: MemoryTechniques) -> list[str]:
    """The ``tpcalc layout`` flags of the memory techniques that differ from its defaults
    (fp8_linear_inputs always, once decided: its default follows --dtype)."""
    from tpcalc.calc.layout.groups import MemoryTechniques

    base = MemoryTechniques()
    args = []
    if memory.fp8_cache:
        args.append("--fp8-cache")
    if memory.fp8_linear_inputs is not None:
        args.append("--fp8-linear-inputs" if memory.fp8_linear_inputs else "--no-fp8-linear-inputs")
    if memory.moe_probs_in_act != base.moe_probs_in_act:
        args.append("--moe-probs-in-act" if memory.moe_probs_in_act else "--no-moe-probs-in-act")
    if not memory.mtp:
        args.append("--no-mtp")
    if memory.offload_layers != base.offload_layers:
        args += ["--offload-layers", str(memory.offload_layers)]
    if memory.moe_dispatcher != base.moe_dispatcher:
        args += ["--moe-dispatcher", memory.moe_dispatcher]
    if memory.loss_kernel != base.loss_kernel:
        args += ["--loss-kernel", memory.loss_kernel]
    if memory.capacity_factor is not None:
        args += ["--capacity-factor", f"{memory.capacity_factor:g}"]
    if memory.router_dtype != base.router_dtype:
        args += ["--router-dtype", memory.router_dtype]
    if memory.dropout is not None:
        args.append("--dropout" if memory.dropout else "--no-dropout")
    if memory.attention != base.attention:
        args += ["--attention", memory.attention]
    return args


def layout_command(model: str, hardware: str, c: Candidate) -> str:
    return "tpcalc layout " + shlex.join(layout_args(model, hardware, c))


def unrepresentable(c: Candidate) -> list[str]:
    """Options of ``c`` that ``tpcalc layout`` has no flag for (its explanation would differ)."""
    from tpcalc.calc.time.step import TimeOptions

    out = []
    ov = c.options.overlap
    if ov.dp_grad_reduce != ov.dp_param_gather:
        out.append("dp grad-reduce and param-gather overlap differ")
    base = TimeOptions()
    for name in ("efficiency_scale", "comm_scale", "vocab_pad_multiple", "grad_reduce_dtype"):
        if getattr(c.options, name) != getattr(base, name):
            out.append(name)
    # 'tpcalc layout --moe-dispatcher flex' also prices the dispatch node-aware
    if c.options.ep_node_dedup != (c.run.memory.moe_dispatcher == "flex"):
        out.append("the dispatcher's memory and its node-aware dispatch differ")
    return out


def explain_layout(model: str, hardware: str, c: Candidate) -> Report:
    """``tpcalc layout --explain``'s report for ``c``: reports.layout.layout_report with the
    candidate's layout, run and options (``unrepresentable`` lists what it cannot carry)."""
    from tpcalc.reports.layout import layout_report
    from tpcalc.reports.request import Layout, Workload

    return layout_report(
        Workload.of_run(model, hardware, c.run), Layout.of(c.layout, c.run),
        with_latency=c.run.with_latency, time_options=c.options,
    )  # fmt: skip
