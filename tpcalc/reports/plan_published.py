"""The planner against published choices (issue 11 §3).

For each published run of ``tpcalc/validation/runs.yaml`` (read through ``validate_time``'s
cases), plan the same model on the same GPUs, sequence and global batch, then check:

1. the published layout is feasible in tpcalc (every divisibility rule, memory within the card);
2. it ranks in the planner's top k (10), or its predicted step time is within 5% of the best;
3. the planner's pick is predicted at least as fast as the published layout.

The published layout's step time is ``tpcalc validate``'s prediction (the calibrated one);
whether it fits is judged with the memory options its source states (a row's ``validate_time``
case prices time only): Megatron FSDP as ZeRO-3, CPU offloading of activations, full recompute,
and FP8 primary weights where the recipe sets ``fp8_param_gather`` (``recipe.precision``),
stored as Transformer Engine stores that FP8 format on that card (``states.weight_storage``).
Where a check fails, ``why`` says what differs, and lists the options the source
states that tpcalc does not model (``UNMODELLED``), each a fact of the row's recipe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from tpcalc.calc.dp.zero import ZeroStage
from tpcalc.calc.layout.groups import layout_problems
from tpcalc.calc.params.states import fp8_format, with_fp8_params
from tpcalc.calc.plan.inverse import worst_rank_bytes
from tpcalc.calc.time.step import STEP_PARTS, StepTime, TimeOptions, hand_split, step_time
from tpcalc.catalog import load_hardware, load_model
from tpcalc.choices import Recompute
from tpcalc.reports.validate_time import (
    Case,
    case_of,
    load_runs,
    precision_options,
    recipe_options,
)
from tpcalc.terms import Report, Row, Scalar, Term, Unit, term
from tpcalc.units import GB

# Issue 11 §3: "ranks in the planner's top 10, or within 5% of the best predicted step time".
TOP_K = 10
WITHIN_RATIO = 0.05
SRC_CHECKS = "issue 11 §3: published layout feasible; in the top 10 or within 5% of the best"

HAND_LAYOUT = "pipeline_model_parallel_layout"  # modelled when tpcalc reads the string
# Options a source states that tpcalc's model leaves out, keyed by the recipe field that states
# them (tpcalc/validation/runs.yaml `recipe`), with what tpcalc does instead.
UNMODELLED: dict[str, str] = {
    "cuda_graph_impl": "CUDA graphs (their memory pool and the launch overhead they remove)",
    "moe_flex_dispatcher_backend": (
        "the DeepEP/HybridEP flex dispatcher's buffers and SMs (its dispatch is priced node-aware)"
    ),
    HAND_LAYOUT: "a hand-set stage layout this tpcalc cannot read (priced as an even split)",
    "delay_wgrad_compute": "delayed weight-gradient GEMMs for EP overlap",
    "use_megatron_fsdp": "Megatron FSDP (priced as ZeRO-3)",
    "recompute_num_layers": "block recompute of N layers (its memory priced as full recompute)",
}
_OFF: tuple[Any, ...] = (None, False, "none", [], {}, 0)


class Published(Struct, frozen=True):
    """One published run as the planner sees it: ``case`` is ``tpcalc validate``'s (its step
    time is that command's prediction), ``memory_case`` the same layout with the memory options
    the source states (what "feasible" is judged on), and the global batch it was measured at."""

    case: Case
    memory_case: Case
    global_batch: int
    unmodelled: tuple[str, ...]


def published(row: dict[str, Any]) -> Published | str:
    """The row as ``tpcalc validate`` prices it, plus its stated memory options, or why it
    cannot be computed."""
    case = case_of(row)
    if isinstance(case, str):
        return case
    recipe = recipe_options(row)
    layout, run = case.layout, case.run
    if row.get("fsdp") or recipe.get("use_megatron_fsdp"):
        layout = replace(layout, zero=ZeroStage.parameters)  # runs.yaml: fsdp > 0 = Megatron FSDP
    if recipe.get("recompute_granularity") == Recompute.full.value:
        run = replace(run, recompute=Recompute.full)
    if offload := recipe.get("cpu_offloading_num_layers"):
        run = replace(run, memory=replace(run.memory, offload_layers=int(offload)))
    precision = precision_options(row)
    if precision.get("fp8_param_gather"):  # FP8 primary weights, stored as format and card say
        fmt = fp8_format(str(precision.get("fp8_recipe")))
        run = replace(run, recipe=with_fp8_params(run.recipe, fmt, load_hardware(case.hardware)))
    unmodelled = tuple(
        text
        for key, text in UNMODELLED.items()
        if recipe.get(key) not in _OFF and not (key == HAND_LAYOUT and case.options.chunk_layers)
    )
    memory_case = replace(case, layout=layout, run=run)
    return Published(case, memory_case, row["global_batch"], unmodelled)


def choice(layout: Any, run: Any) -> dict[str, Scalar]:
    """The choices a layout makes, as the planner searches them (compared pick vs published)."""
    return {
        "TP": layout.tp, "PP": layout.pp, "CP": layout.cp, "VP": run.vpp, "EP": layout.ep,
        "DP": layout.dp, "mbs": run.micro_batch, "ZeRO": int(layout.zero),
        "recompute": run.recompute.value
        + ("+" + ",".join(run.memory.recompute_modules) if run.memory.recompute_modules else ""),
    }  # fmt: skip


def choice_text(c: dict[str, Scalar]) -> str:
    return " ".join(f"{k}{v}" if k not in ("recompute",) else str(v) for k, v in c.items())


class Pick(Struct, frozen=True):
    """What the planner returns that the checks read: its best layouts, fastest first."""

    choices: tuple[dict[str, Scalar], ...]  # ``choice`` of each, in rank order
    step_times_s: tuple[float, ...]
    steps: tuple[StepTime, ...]
    top_k: int


class Check(Struct, frozen=True):
    """The three checks on one published run, with the figures they compare."""

    item: Published
    problem: str | None  # why the published layout is not feasible in tpcalc (None: it is)
    memory_bytes: float
    capacity_bytes: float
    published_step_s: float
    published: StepTime
    pick: Pick

    @property
    def feasible(self) -> bool:
        return self.problem is None

    @property
    def best_step_s(self) -> float | None:
        return self.pick.step_times_s[0] if self.pick.step_times_s else None

    @property
    def rank(self) -> int | None:
        """1 + the planner's layouts predicted faster, when that is within its top k."""
        faster = sum(1 for t in self.pick.step_times_s if t < self.published_step_s)
        if faster >= self.pick.top_k:
            return None
        return faster + 1

    @property
    def gap_ratio(self) -> float | None:
        """Published step / best step − 1 (how much slower tpcalc predicts the published run)."""
        best = self.best_step_s
        return self.published_step_s / best - 1 if best else None

    @property
    def in_top_or_close(self) -> bool:
        gap = self.gap_ratio
        return self.rank is not None or (gap is not None and gap <= WITHIN_RATIO)

    @property
    def pick_as_fast(self) -> bool:
        best = self.best_step_s
        return best is not None and best <= self.published_step_s

    @property
    def holds(self) -> bool:
        return self.feasible and self.in_top_or_close and self.pick_as_fast

    def why(self) -> str:
        """Why a check fails: the infeasibility, the step part the pick saves most on, or the
        options that make a published layout faster than the pick; then the options the source
        states that tpcalc does not model."""
        reasons = []
        if self.problem is not None:
            reasons.append(self.problem)
        if self.pick.steps and not self.in_top_or_close:
            best = self.pick.steps[0]
            part = max(STEP_PARTS, key=lambda p: getattr(self.published, p) - getattr(best, p))
            saved = getattr(self.published, part) - getattr(best, part)
            mine = choice(self.item.case.layout, self.item.case.run)
            theirs = self.pick.choices[0]
            changed = ", ".join(
                f"{k} {mine[k]} -> {theirs[k]}" for k in mine if mine[k] != theirs.get(k)
            )
            reasons.append(
                f"the pick changes {changed or 'only overlap options'} and saves {saved:.2f} s "
                f"of {part.removesuffix('_time_s').replace('_', ' ')}"
            )
        best_s = self.best_step_s
        if self.feasible and best_s is not None and not self.pick_as_fast:
            offload = self.item.memory_case.run.memory.offload_layers
            unsearched = f" ({offload} layers' activations on the host)" if offload else ""
            reasons.append(
                f"the published layout is predicted {1 - self.published_step_s / best_s:.1%} "
                f"faster than the pick: it fits with options the planner does not search"
                f"{unsearched}"
            )
        if reasons and self.item.unmodelled:
            reasons.append("not modelled: " + "; ".join(self.item.unmodelled))
        return "; ".join(reasons)


def check(item: Published, planner: Callable[[Published], Pick]) -> Check:
    """Price the published layout as stated and run the planner on the same question."""
    c, m = item.case, item.memory_case
    spec, hw = load_model(c.model), load_hardware(c.hardware)
    counts = hand_split(c.options, spec.num_hidden_layers, c.layout.pp, c.run.vpp)
    problems = layout_problems(spec, m.layout, m.run, by_hand=counts is not None)
    capacity = hw.memory_bytes.value
    memory = worst_rank_bytes(spec, m.layout, m.run, counts)
    problem = "; ".join(problems) if problems else None
    if problem is None and memory > capacity:
        problem = f"needs {memory / GB:.1f} GB per rank of {capacity / GB:.0f} GB"
    st = step_time(spec, hw, c.layout, c.run, c.options)
    return Check(item, problem, memory, capacity, st.step_time_s, st, planner(item))


def engine_planner(top_k: int = TOP_K) -> Callable[[Published], Pick]:
    """The planner (``tpcalc.calc.plan``) on a published run's question: same model, hardware,
    GPUs, NVLink domain, sequence, global batch, dtype, state recipe (the published layout's
    memory recipe: FP8 primary weights where the recipe sets them), memory techniques and
    stage-split rule (the recipe's embedding and loss accounting); the layout, ZeRO stage,
    recompute and overlaps searched."""

    def run(item: Published) -> Pick:
        from tpcalc.calc.plan.request import build_request
        from tpcalc.calc.plan.search import plan

        c = item.case
        request = build_request(
            load_model(c.model), load_hardware(c.hardware), gpus=c.gpus, seq=c.run.seq,
            global_batch=item.global_batch, gpus_per_node=c.layout.gpus_per_node,
            recipe=item.memory_case.run.recipe, dtype=c.run.dtype, memory=c.run.memory,
            top_k=top_k,
            time_options=TimeOptions(
                overlap=c.options.overlap, embedding_in_split=c.options.embedding_in_split,
                loss_in_split=c.options.loss_in_split,
            ),
        )  # fmt: skip
        result = plan(request)
        return Pick(
            tuple(choice(cand.layout, cand.run) for cand in result.top),
            tuple(cand.step_time_s for cand in result.top),
            tuple(cand.step for cand in result.top),
            top_k,
        )

    return run


def published_items(ids: set[str] | None = None) -> tuple[list[Published], list[str]]:
    """Every computable published run (or those in ``ids``), and why the others are skipped."""
    items, skipped = [], []
    for row in load_runs():
        if ids is not None and row["id"] not in ids:
            continue
        got = published(row)
        if isinstance(got, str):
            skipped.append(got)
        else:
            items.append(got)
    return items, skipped


def checks(
    ids: set[str] | None = None, planner: Callable[[Published], Pick] | None = None
) -> tuple[list[Check], list[str]]:
    items, skipped = published_items(ids)
    run = planner or engine_planner()
    return [check(i, run) for i in items], skipped


def _row(ch: Check) -> Row:
    c = ch.item.case
    inputs: dict[str, Scalar] = {
        "id": c.id, "model": c.model, "hardware": c.hardware, "gpus": c.gpus, "seq": c.run.seq,
        "global_batch": ch.item.global_batch,
        "published": choice_text(choice(ch.item.memory_case.layout, ch.item.memory_case.run)),
        "state_recipe": ch.item.memory_case.run.recipe.value,
        "pick": choice_text(ch.pick.choices[0]) if ch.pick.choices else None,
    }  # fmt: skip
    terms: list[Term] = [
        term("published_feasible", "published feasible", ch.feasible, Unit.text,
             formula="no layout problem; memory per rank <= card", source=SRC_CHECKS),
        term("published_memory_bytes_per_rank", "published memory per rank", ch.memory_bytes,
             Unit.bytes, formula="most loaded pipeline rank",
             source="tpcalc.calc.layout.memory.rank_memory"),
        term("published_step_time_s", "published step (predicted)", ch.published_step_s,
             Unit.seconds, formula="step-time model on the published layout",
             source="tpcalc.calc.time.step"),
        term("best_step_time_s", "planner's best step", ch.best_step_s, Unit.seconds,
             formula="the planner's first layout", source="tpcalc.calc.plan"),
        term("published_rank", "published rank", ch.rank, Unit.count,
             formula="1 + planner layouts predicted faster (within the top k)",
             source=SRC_CHECKS, top_k=ch.pick.top_k),
        term("gap_ratio", "published / best − 1", ch.gap_ratio, Unit.ratio,
             formula="published step / best step − 1", source=SRC_CHECKS),
        term("checks_hold", "checks hold", ch.holds, Unit.text,
             formula="feasible and (top k or gap <= 5%) and best <= published", source=SRC_CHECKS),
        term("why", "why not", ch.why(), Unit.text, formula="", source=ch.item.case.source),
    ]  # fmt: skip
    return Row(inputs=inputs, terms=tuple(terms))


def published_report(
    ids: set[str] | None = None, planner: Callable[[Published], Pick] | None = None
) -> Report:
    """One row per published run: the checks and, where one fails, why."""
    done, skipped = checks(ids, planner)
    held = sum(1 for ch in done if ch.holds)
    return Report(
        title="The planner against published layouts (issue 11 §3)",
        rows=tuple(_row(ch) for ch in done),
        warnings=tuple(f"skipped {s}" for s in skipped),
        notes=(f"{held} of {len(done)} published runs pass all three checks",),
    )
