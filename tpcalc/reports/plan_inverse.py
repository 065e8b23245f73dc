"""Inverse questions, the Python twin of ``tpcalc plan --max-seq`` / ``--max-micro-batch`` and
``tpcalc plan --objective gpus --target-step-time`` (issue 11 §4).

It takes the request every report takes (``Workload``, ``Layout``) and asks
``tpcalc.calc.plan.inverse`` for the largest sequence or micro-batch that fits the memory budget;
the GPU question takes the planner's best step time per GPU count.
"""

from __future__ import annotations

from collections.abc import Mapping

from tpcalc.calc.layout.groups import LayoutRun, ParallelLayout
from tpcalc.calc.layout.memory import RANK_TOTAL_FORMULA
from tpcalc.calc.plan.inverse import (
    SRC_SEARCH,
    MaxFit,
    MinGpus,
    max_micro_batch,
    max_seq,
    memory_budget_bytes,
)
from tpcalc.errors import InputError
from tpcalc.reports.request import Layout, Workload
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Report, Row, Scalar, Term, Unit, term
from tpcalc.units import GB

SRC_BUDGET = (
    "tpcalc plan: card memory (hardware config) less --memory-headroom (a share) and "
    "--reserve-gb (fixed), the room left for the CUDA context and allocator fragmentation"
)
SRC_GPUS = (
    "tpcalc.calc.plan.inverse.min_gpus: powers of two up, then bisection over node multiples; "
    "each count's best step time from the planner (tpcalc.calc.plan)"
)


def budget_term(card_bytes: float, headroom_ratio: float, reserve_bytes: float) -> Term:
    """The memory a rank may use, as a term with its formula."""
    check_budget(headroom_ratio, reserve_bytes, card_bytes)
    return term(
        "memory_budget_bytes", "memory budget per rank",
        memory_budget_bytes(card_bytes, headroom_ratio, reserve_bytes), Unit.bytes,
        formula="card · (1 − headroom) − reserve", source=SRC_BUDGET,
        card_memory_bytes=card_bytes, headroom_ratio=headroom_ratio, reserve_bytes=reserve_bytes,
    )  # fmt: skip


def check_budget(headroom_ratio: float, reserve_bytes: float, card_bytes: float) -> None:
    """A headroom outside [0, 1) or a reserve that leaves nothing is an input error."""
    if not 0.0 <= headroom_ratio < 1.0:
        raise InputError(
            f"--memory-headroom must be a share in [0, 1), e.g. 0.1 for 10%; got {headroom_ratio}"
        )
    if not 0.0 <= reserve_bytes < card_bytes * (1.0 - headroom_ratio):
        raise InputError(
            f"--reserve-gb must be >= 0 and leave memory on the card "
            f"({card_bytes * (1.0 - headroom_ratio) / GB:g} GB after the headroom); "
            f"got {reserve_bytes / GB:g}"
        )


def _echo(spec: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, run: LayoutRun) -> dict:
    return {
        "model": spec.name, "hardware": hw.name, "world_size": layout.world, "tp": layout.tp,
        "cp": layout.cp, "pp": layout.pp, "dp": layout.dp, "ep": layout.ep, "etp": layout.etp,
        "zero": int(layout.zero), "vpp": run.vpp, "schedule": run.schedule.value,
        "sp": run.sp, "recompute": run.recompute.value, "recipe": run.recipe.value,
        "dtype": run.dtype.value, **run.memory.echo(),
    }  # fmt: skip


def _split(
    spec: ModelSpec, layout: ParallelLayout, run: LayoutRun, embedding: bool, loss: bool
) -> tuple[tuple[int, ...] | None, dict[str, Scalar]]:
    """The layers of each virtual stage when the embedding and/or the loss count as layers of
    the split (Megatron-Core's accounted split, ``pipeline.accounted_split``; None: the even
    split), and their echo as ``tpcalc layout`` prints it."""
    from tpcalc.calc.time.step import TimeOptions, hand_split
    from tpcalc.reports.layout import split_inputs

    opts = TimeOptions(embedding_in_split=embedding, loss_in_split=loss)
    counts = hand_split(opts, spec.num_hidden_layers, layout.pp, run.vpp)
    return counts, split_inputs(opts, counts)


def _fit_terms(fit: MaxFit, key: str, label: str, budget: Term, count: str) -> list[Term]:
    inputs: dict[str, Scalar] = {"step": fit.step, "probes": len(fit.probes)}
    return [
        term(f"max_{key}", f"largest {label} that fits ({count})", fit.value, Unit.count,
             formula=f"largest legal {label} with memory per rank <= budget", source=SRC_SEARCH,
             symbols=inputs),
        term("memory_bytes_per_rank", f"memory per rank at that {label}", fit.memory_bytes,
             Unit.bytes, formula=f"most loaded pipeline rank: {RANK_TOTAL_FORMULA}",
             source="tpcalc.calc.layout.memory.rank_memory"),
        term(f"next_{key}", f"next legal {label} ({count}; does not fit)", fit.next_value,
             Unit.count,
             formula=f"the legal {label} after the largest", source=SRC_SEARCH),
        term("next_memory_bytes_per_rank", f"memory per rank at the next {label}",
             fit.next_memory_bytes, Unit.bytes,
             formula=f"most loaded pipeline rank: {RANK_TOTAL_FORMULA}",
             source="tpcalc.calc.layout.memory.rank_memory"),
        budget,
        # the margins on each side, at their own scale: both ends can print as the budget
        term("memory_left_bytes", f"memory left at that {label}",
             None if fit.memory_bytes is None else budget.number - fit.memory_bytes, Unit.bytes,
             formula="budget − memory per rank at that value", source=SRC_SEARCH),
        term("next_over_budget_bytes", f"over the budget at the next {label}",
             None if fit.next_memory_bytes is None else fit.next_memory_bytes - budget.number,
             Unit.bytes, formula="memory per rank at the next value − budget",
             source=SRC_SEARCH),
    ]  # fmt: skip


def _storage_note(workload: Workload) -> tuple[str, ...]:
    """The FP8 weight-storage note of the workload's recipe on its card, if any."""
    from tpcalc.calc.params.states import fp8_storage_note

    note = fp8_storage_note(workload.recipe, workload.hw)
    return (note,) if note else ()


def _nothing_fits(fit: MaxFit, label: str) -> tuple[str, ...]:
    if fit.value is not None:
        return ()
    need = f"{fit.next_memory_bytes / GB:.1f} GB" if fit.next_memory_bytes else "more"
    return (
        f"not even {label} {fit.next_value} fits: it needs {need} per rank of a "
        f"{fit.budget_bytes / GB:.1f} GB budget; raise tp, pp or the ZeRO stage, or recompute",
    )


def max_seq_report(
    workload: Workload,
    layout: Layout,
    *,
    headroom_ratio: float = 0.0,
    reserve_bytes: float = 0.0,
    embedding_in_split: bool = False,
    loss_in_split: bool = False,
) -> Report:
    """The longest sequence that fits ``workload`` on ``layout`` (``tpcalc plan --max-seq``;
    the workload's own sequence length is not used: it is what is searched);
    ``embedding_in_split``/``loss_in_split``: Megatron-Core's accounted pipeline split."""
    spec, hw = workload.spec, workload.hw
    parallel, run = layout.parallel(workload.node(layout)), workload.run(layout, with_latency=False)
    budget = budget_term(hw.memory_bytes.value, headroom_ratio, reserve_bytes)
    counts, split = _split(spec, parallel, run, embedding_in_split, loss_in_split)
    fit = max_seq(spec, parallel, run, budget.number, counts=counts)
    row = Row(
        inputs={**_echo(spec, hw, parallel, run), **split, "micro_batch": run.micro_batch,
                "microbatches": run.microbatches},
        terms=tuple(_fit_terms(fit, "seq_tokens", "sequence", budget, "tokens")),
    )  # fmt: skip
    return Report(
        title=f"Longest sequence that fits {spec.name} on {parallel.world} × {hw.name}",
        rows=(row,),
        # the workload's own notes but the defaulted-seq one: the sequence is what is searched
        warnings=(*_storage_note(workload), *_nothing_fits(fit, "seq")),
    )


def max_micro_batch_report(
    workload: Workload,
    layout: Layout,
    *,
    global_batch: int | None = None,
    headroom_ratio: float = 0.0,
    reserve_bytes: float = 0.0,
    embedding_in_split: bool = False,
    loss_in_split: bool = False,
) -> Report:
    """The largest micro-batch that fits ``workload`` on ``layout`` (``tpcalc plan
    --max-micro-batch``; the workload's micro-batch is what is searched); with a global batch
    the micro-batches per step follow from it; the split options as in ``max_seq_report``."""
    from tpcalc.reports.inputs import positive

    spec, hw = workload.spec, workload.hw
    parallel, run = layout.parallel(workload.node(layout)), workload.run(layout, with_latency=False)
    budget = budget_term(hw.memory_bytes.value, headroom_ratio, reserve_bytes)
    gb = positive(global_batch, "--global-batch") if global_batch is not None else None
    counts, split = _split(spec, parallel, run, embedding_in_split, loss_in_split)
    fit = max_micro_batch(spec, parallel, run, budget.number, global_batch=gb, counts=counts)
    inputs = {**_echo(spec, hw, parallel, run), **split, "seq": run.seq, "global_batch": gb}
    if gb is None:
        inputs["microbatches"] = run.microbatches
    row = Row(
        inputs=inputs,
        terms=tuple(_fit_terms(fit, "micro_batch", "micro-batch", budget, "sequences")),
    )
    return Report(
        title=f"Largest micro-batch that fits {spec.name} on {parallel.world} × {hw.name}",
        rows=(row,),
        warnings=(*workload.warnings, *_nothing_fits(fit, "micro-batch")),
    )


def min_gpus_report(
    title: str, echo: Mapping[str, Scalar], found: MinGpus, max_gpus: int
) -> Report:
    """The fewest GPUs whose best layout reaches the target (``found``, the planner's
    ``PlanResult.fewest``): one row per GPU count evaluated, the answer flagged."""
    target_step_time_s = found.target_step_time_s
    rows = []
    for p in sorted(found.probes, key=lambda p: p.gpus):
        met = p.step_time_s is not None and p.step_time_s <= target_step_time_s
        rows.append(
            Row(
                inputs={**echo, "gpus": p.gpus},
                terms=(
                    term(
                        "best_step_time_s",
                        "best step time",
                        p.step_time_s,
                        Unit.seconds,
                        formula="the planner's best feasible layout on this many GPUs",
                        source=SRC_GPUS,
                    ),
                    term(
                        "target_step_time_s",
                        "target",
                        target_step_time_s,
                        Unit.seconds,
                        formula="--target-step-time",
                        source="input",
                    ),
                    term(
                        "meets_target",
                        "meets the target",
                        met,
                        Unit.text,
                        formula="best step time <= target",
                        source=SRC_GPUS,
                    ),
                    term(
                        "answer",
                        "fewest GPUs",
                        p.gpus == found.gpus,
                        Unit.text,
                        formula="the smallest count evaluated that meets the target",
                        source=SRC_GPUS,
                    ),
                ),
            )  # fmt: skip
        )
    warnings: tuple[str, ...] = ()
    if found.gpus is None:
        warnings = (f"no GPU count up to {max_gpus:,} reaches a {target_step_time_s:g} s step",)
    return Report(title=title, rows=tuple(rows), warnings=warnings)
