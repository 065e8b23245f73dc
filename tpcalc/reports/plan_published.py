"""The planner against published choices (issue 11 §3).

For each published run of ``tpcalc/validation/runs.yaml`` (read through ``validate_time``'s
cases), plan the same model on the same GPUs, sequence and global batch, then check:

1. the published layout is feasible in tpcalc (every divisibility rule, memory within the card);
2. it ranks in the planner's top k (10), or its predicted step time is within 5% of the best;
3. the planner's pick is predicted at least as fast as the published layout.

The published layout's step time is ``tpcalc validate``'s prediction (the calibrated one);
whether it fits is judged with the memory options its source states (a row's ``validate_time``
case prices time only): Megatron FSDP as ZeRO-3, CPU offloading of activations, full recompute,
NeMo 1.x's Apex optimizer in BF16 where the launcher config sets optim.dtype and
optim.grad_sync_dtype bf16 (``StateRecipe.bf16_states``),
and FP8 primary weights where the recipe sets ``fp8_param_gather`` (``recipe.precision``),
stored as Transformer Engine stores that FP8 format on that card (``states.weight_storage``).
Where a check fails, ``why`` says what differs, and lists the options the source
states that tpcalc does not model (``UNMODELLED``), each a fact of the row's recipe.

A source may leave choices its run made unprinted (the Llama 3 paper: an interleaved schedule,
its virtual stages and micro-batch size not printed; the row's ``unstated``). Pricing such a row
at tpcalc's defaults (no interleaving) would check a layout the run did not use, so the published
layout is completed with the planner's best over the unprinted choices, every printed dimension
and what the source states about the rest pinned (``completion_pins``): the checks then ask
whether the printed dimensions are among the best, which is all the source lets anyone ask.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from msgspec import Struct, field
from msgspec.structs import replace

from tpcalc.calc.layout.groups import layout_problems
from tpcalc.calc.params.states import fp8_format, with_fp8_params
from tpcalc.calc.plan.inverse import worst_rank_bytes
from tpcalc.calc.plan.types import PIN_DIMS
from tpcalc.calc.time.step import STEP_PARTS, StepTime, TimeOptions, hand_split, step_time
from tpcalc.catalog import load_hardware, load_model
from tpcalc.choices import Recompute, Schedule, StateRecipe
from tpcalc.errors import ConfigError
from tpcalc.reports.validate_time import (
    Case,
    case_of,
    load_runs,
    loss_kernel,
    precision_options,
    preset_disagreement,
    preset_options,
    recipe_options,
    row_enum,
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
    unstated: tuple[str, ...] = ()  # pin dimensions the source does not print (row ``unstated``)
    stated: dict[str, Any] = field(default_factory=dict)  # what it states of them, as pins
    # what the run's software could do, as pins (row ``software``: e.g. Megatron-LM of 2021 had
    # no selective recompute, sequence parallelism or ZeRO); the held planner keeps to them
    software: dict[str, Any] = field(default_factory=dict)
    # where the row's recipe preset describes another layout: what differs and the memory options
    # the preset sets, which are therefore not applied (``preset_elsewhere``)
    preset_note: str | None = None


def _unstated(row: dict[str, Any]) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The row's ``unstated`` choices and the pins the source states about them, checked against
    the planner's pin dimensions."""
    got = row.get("unstated") or {}
    choices = tuple(got.get("choices") or ())
    pins = dict(got.get("pins") or {})
    _check_dims(row, "unstated", (*choices, *pins))
    return choices, pins


def _software(row: dict[str, Any]) -> dict[str, Any]:
    """The row's ``software.pins``: the values of each pin dimension its software offered."""
    pins = dict((row.get("software") or {}).get("pins") or {})
    _check_dims(row, "software", tuple(pins))
    return pins


# The recipe fields that decide what a rank keeps, named when a preset's are not applied.
PRESET_MEMORY_FIELDS = (
    "recompute_granularity", "recompute_modules", "recompute_num_layers",
    "cpu_offloading_num_layers",
)  # fmt: skip


def preset_elsewhere(row: dict[str, Any]) -> str | None:
    """Where the row's recipe preset describes another layout than the printed row
    (``disagrees_with_row`` beyond the per-step fields), ``recipe_options`` applies none of its
    options, so the layout is priced at the FRAMEWORK defaults: what differs, and the memory
    options the preset sets that are therefore left out. None when the preset is applied."""
    differ = preset_disagreement(row)
    if not differ:
        return None
    sets = preset_options(row)
    dropped = [
        f"{k} {','.join(map(str, v)) if isinstance(v, list) else v}"
        for k in PRESET_MEMORY_FIELDS
        if (v := sets.get(k)) not in _OFF
    ]
    where = ", ".join(
        f"{k} {v.get('preset')} where the row prints {v.get('row')}" if isinstance(v, dict) else k
        for k, v in differ.items()
    )
    among = f", among them {' and '.join(dropped)}" if dropped else ""
    return f"the recipe preset sets {where}, so its options are not applied{among}"


def _check_dims(row: dict[str, Any], where: str, dims: tuple[str, ...]) -> None:
    for dim in dims:
        if dim not in PIN_DIMS:
            raise ConfigError(
                f"{row['id']}: {where}: unknown dimension {dim!r}; valid: {', '.join(PIN_DIMS)}"
            )


# A row's ``memory_techniques``: memory options its source states in words no recipe key
# carries (the DeepSeek-V3 report's own framework), each as tpcalc's option of that name.
STATED_MEMORY = ("fp8_cache", "moe_probs_in_act", "state_recipe")


def _stated_memory(row: dict[str, Any], run: Any) -> Any:
    """``run`` with the row's ``memory_techniques`` (``STATED_MEMORY``) applied; a key tpcalc
    does not know, or a state recipe it does not know, is a ConfigError naming the valid ones."""
    stated = dict(row.get("memory_techniques") or {})
    stated.pop("source", None)
    for key in stated:
        if key not in STATED_MEMORY:
            raise ConfigError(
                f"{row['id']}: memory_techniques: unknown option {key!r}; valid: "
                f"{', '.join(STATED_MEMORY)}"
            )
    memory = replace(
        run.memory, **{k: bool(stated[k]) for k in ("fp8_cache", "moe_probs_in_act") if k in stated}
    )
    run = replace(run, memory=memory)
    if "state_recipe" in stated:
        recipe = row_enum(
            row, "memory_techniques state_recipe", StateRecipe, stated["state_recipe"]
        )
        run = replace(run, recipe=recipe)
    return run


def published(row: dict[str, Any]) -> Published | str:
    """The row as ``tpcalc validate`` prices it, plus its stated memory options, or why it
    cannot be computed."""
    case = case_of(row)
    if isinstance(case, str):
        return case
    recipe = recipe_options(row)
    layout, run = case.layout, case.run
    if (
        recipe.get("recompute_granularity") == Recompute.full.value
        and case.options.recompute_layers is None
    ):  # full of every layer; of N per chunk, block recompute (``TimeOptions.recompute_layers``)
        run = replace(run, recompute=Recompute.full)
    if offload := recipe.get("cpu_offloading_num_layers"):
        run = replace(run, memory=replace(run.memory, offload_layers=int(offload)))
    if (
        recipe.get("optimizer_dtype") == "bf16"
        and recipe.get("optimizer_grad_sync_dtype") == "bf16"
    ):
        run = replace(run, recipe=StateRecipe.bf16_states)  # NeMo 1.x Apex optimizer in BF16
    run = _stated_memory(row, run)
    run = replace(run, memory=replace(run.memory, loss_kernel=loss_kernel(row).value))
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
    unstated, stated = _unstated(row)
    return Published(
        case,
        memory_case,
        row["global_batch"],
        unmodelled,
        unstated,
        stated,
        _software(row),
        preset_elsewhere(row),
    )


def completion_pins(item: Published) -> dict[str, Any]:
    """Pins that hold a search to the published layout but for its unstated choices: every
    printed size, the ZeRO stage and recompute as the memory case has them, and what the source
    states about the unstated ones (``Published.stated``). Recompute frees its modules too."""
    m = item.memory_case
    printed: dict[str, Any] = {
        "tp": m.layout.tp, "cp": m.layout.cp, "pp": m.layout.pp, "dp": m.layout.dp,
        "ep": m.layout.ep, "etp": m.layout.etp, "vpp": m.run.vpp,
        "micro_batch": m.run.micro_batch, "zero": int(m.layout.zero),
        "recompute": m.run.recompute.value, "recompute_modules": m.run.memory.recompute_modules,
    }  # fmt: skip
    free = set(item.unstated) | ({"recompute_modules"} if "recompute" in item.unstated else set())
    pins = {dim: [value] for dim, value in printed.items() if dim not in free}
    pins.update({dim: v if isinstance(v, list) else [v] for dim, v in item.stated.items()})
    return pins


def choice(layout: Any, run: Any, options: TimeOptions | None = None) -> dict[str, Scalar]:
    """The choices a layout makes, as the planner searches them (compared pick vs published);
    with ``options``, also which communication it overlaps (``overlaps``) and its block
    recompute ("full N/chunk": N layers of each chunk, ``TimeOptions.recompute_layers``)."""
    recompute = run.recompute.value + (
        "+" + ",".join(run.memory.recompute_modules) if run.memory.recompute_modules else ""
    )
    block = options.recompute_layers if options is not None else None
    if block and run.recompute is not Recompute.full:  # block recompute of N layers per chunk
        recompute = f"full {block}/chunk" + (f"+{recompute}" if recompute != "none" else "")
    got: dict[str, Scalar] = {
        "TP": layout.tp, "PP": layout.pp, "CP": layout.cp, "VP": run.vpp, "EP": layout.ep,
        "ETP": layout.etp, "DP": layout.dp, "mbs": run.micro_batch, "ZeRO": int(layout.zero),
        "recompute": recompute, "schedule": run.schedule.value,
    }  # fmt: skip
    if options is not None:
        got["overlap"] = overlaps(layout, options)
    return got


def overlap_flags(options: TimeOptions) -> dict[str, bool]:
    """Whether each dimension's communication runs under compute (``step.Overlap``): the TP
    userbuffers, the CP ring, the EP all-to-all (off unless turned on), the PP sends, the DP
    gradient reduce and parameter gather."""
    ov = options.overlap
    return {
        "tp": ov.tp_comm, "cp": ov.cp_ring, "ep": bool(ov.ep_a2a), "pp": ov.pp_p2p,
        "dp": ov.dp_grad_reduce and ov.dp_param_gather,
    }  # fmt: skip


# The planner's pin of each dimension's overlap (``calc.plan.space.overlap``).
_OVERLAP_PINS = {
    "tp": "tp_comm_overlap", "cp": "cp_overlap", "ep": "ep_overlap", "pp": "pp_overlap",
    "dp": "dp_overlap",
}  # fmt: skip


def overlaps(layout: Any, options: TimeOptions) -> str:
    """The dimensions whose communication runs under compute (``overlap_flags``), among those
    the layout has (a size above 1), or "none"."""
    sizes = {"tp": layout.tp, "cp": layout.cp, "ep": layout.ep, "pp": layout.pp, "dp": layout.dp}
    on = [d for d, flag in overlap_flags(options).items() if sizes[d] > 1 and flag]
    return ",".join(on) or "none"


def _size(c: dict[str, Scalar], dim: str) -> int:
    size = c[dim.upper()]
    return size if isinstance(size, int) else 1


def overlap_changes(mine: dict[str, Scalar], theirs: dict[str, Scalar]) -> list[str]:
    """The overlaps one choice turns on or off against another, among the dimensions both
    have (an overlap of a dimension one of them does not split is no change)."""
    if "overlap" not in mine or "overlap" not in theirs:
        return []
    both = {
        d for d in ("tp", "cp", "ep", "pp", "dp")
        if _size(mine, d) > 1 and _size(theirs, d) > 1
    }  # fmt: skip
    a = set(str(mine["overlap"]).split(",")) & both
    b = set(str(theirs["overlap"]).split(",")) & both
    return [f"{d.upper()} overlap {'on' if d in b else 'off'}" for d in sorted(a ^ b)]


def choice_text(c: dict[str, Scalar]) -> str:
    """The layout columns of the table: sizes, ZeRO and recompute, and the schedule where it
    is not Megatron's for the virtual stages (1F1B, interleaved with VP > 1): DualPipe, ZB-H1,
    GPipe (the overlaps are said in ``why`` where they differ). ETP is shown where it is not 1
    (no published run of the tables splits its experts by TP)."""
    return " ".join(
        str(v) if k in ("recompute", "schedule") else f"{k}{v}"
        for k, v in c.items()
        if k != "overlap"
        and not (k == "schedule" and _implied_schedule(c))
        and not (k == "ETP" and v == 1)
    )


def _implied_schedule(c: dict[str, Scalar]) -> bool:
    """Whether a choice's schedule is the one Megatron runs for its virtual stages (1F1B,
    interleaved with VP > 1), which the VP column already says."""
    megatron = Schedule.interleaved if c.get("VP", 1) != 1 else Schedule.one_f_one_b
    return c.get("schedule") == megatron.value


class Pick(Struct, frozen=True):
    """What the planner returns that the checks read: its best layouts, fastest first."""

    choices: tuple[dict[str, Scalar], ...]  # ``choice`` of each, in rank order
    step_times_s: tuple[float, ...]
    steps: tuple[StepTime, ...]
    top_k: int
    memory_bytes: tuple[float, ...] = ()  # the most loaded rank of each, where known


def rank_in(pick: Pick, published_s: float) -> int | None:
    """1 + the pick's layouts predicted faster than ``published_s``, within its top k."""
    faster = sum(1 for t in pick.step_times_s if t < published_s)
    return None if faster >= pick.top_k else faster + 1


def gap_to(pick: Pick, published_s: float) -> float | None:
    """``published_s`` / the pick's best − 1 (how much slower tpcalc predicts the published)."""
    return published_s / pick.step_times_s[0] - 1 if pick.step_times_s else None


def top_or_close(pick: Pick, published_s: float) -> bool:
    """Check 2: in the pick's top k, or within 5% of its best."""
    gap = gap_to(pick, published_s)
    return rank_in(pick, published_s) is not None or (gap is not None and gap <= WITHIN_RATIO)


# The ``choice`` key of each pin dimension a source may leave unprinted.
_UNSTATED_KEYS = {
    "tp": "TP", "pp": "PP", "cp": "CP", "vpp": "VP", "ep": "EP", "dp": "DP",
    "micro_batch": "mbs", "zero": "ZeRO", "recompute": "recompute",
}  # fmt: skip

# What the published ZeRO stage is in the recipes (Megatron FSDP is priced as ZeRO-3).
ZERO_AS_PUBLISHED = {1: "the recipe's distributed optimizer", 3: "the recipe's Megatron FSDP"}


class Check(Struct, frozen=True):
    """The three checks on one published run, with the figures they compare. ``held``: the
    planner's answer when it is held to the run's own settings, its ZeRO stage and overlaps
    (``published_settings``), asked where check 2 fails and the pick changes one of them (the
    recipes fix them: distributed optimizer or FSDP, which communication runs under compute).
    ``completed``: where the source leaves choices unprinted, the planner's best with every printed
    one pinned, which the checks take as the published layout."""

    item: Published
    problem: str | None  # why the published layout is not feasible in tpcalc (None: it is)
    memory_bytes: float
    capacity_bytes: float
    published_step_s: float
    published: StepTime
    pick: Pick
    held: Pick | None = None
    completed: Pick | None = None

    @property
    def published_choice(self) -> dict[str, Scalar]:
        """The published layout's choices (with its overlaps): the completion's where there is
        one, else the row's as ``tpcalc validate`` prices it."""
        if self.completed is not None and self.completed.choices:
            return self.completed.choices[0]
        c = self.item.case
        return choice(c.layout, c.run, c.options)

    def published_text(self) -> str:
        """The published layout's columns; a completed choice is marked * (not printed by the
        source: the planner's best with the printed ones pinned)."""
        if self.completed is None:
            m = self.item.memory_case
            return choice_text(choice(m.layout, m.run, self.item.case.options))
        if not self.completed.choices:
            return "no completion fits"
        marked = {_UNSTATED_KEYS.get(d, d) for d in self.item.unstated}
        return choice_text(
            {k: f"{v}*" if k in marked else v for k, v in self.completed.choices[0].items()}
        )

    @property
    def feasible(self) -> bool:
        return self.problem is None

    @property
    def best_step_s(self) -> float | None:
        return self.pick.step_times_s[0] if self.pick.step_times_s else None

    @property
    def rank(self) -> int | None:
        """1 + the planner's layouts predicted faster, when that is within its top k."""
        return rank_in(self.pick, self.published_step_s)

    @property
    def gap_ratio(self) -> float | None:
        """Published step / best step − 1 (how much slower tpcalc predicts the published run)."""
        return gap_to(self.pick, self.published_step_s)

    @property
    def in_top_or_close(self) -> bool:
        return top_or_close(self.pick, self.published_step_s)

    @property
    def published_zero(self) -> int:
        """The ZeRO stage the source states (the memory case: FSDP rows are ZeRO-3)."""
        return int(self.item.memory_case.layout.zero)

    @property
    def held_in_top_or_close(self) -> bool | None:
        """Check 2 against the planner held to the run's settings (None: not asked)."""
        return None if self.held is None else top_or_close(self.held, self.published_step_s)

    @property
    def holds_when_held(self) -> bool:
        """All three checks against the planner held to the run's settings (False where it was
        not asked)."""
        held = self.held
        if held is None or not held.step_times_s:
            return False
        return bool(
            self.feasible and self.held_in_top_or_close
            and held.step_times_s[0] <= self.published_step_s
        )  # fmt: skip

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
            if self.item.preset_note is not None:
                reasons.append(self.item.preset_note)
        if self.pick.steps and not self.in_top_or_close:
            best = self.pick.steps[0]
            part = max(STEP_PARTS, key=lambda p: getattr(self.published, p) - getattr(best, p))
            saved = getattr(self.published, part) - getattr(best, part)
            mine = self.published_choice
            theirs = self.pick.choices[0]
            changes = [
                f"{k} {mine[k]} -> {theirs[k]}"
                for k in mine
                if k != "overlap" and mine[k] != theirs.get(k)
                and not (k == "schedule" and _implied_schedule(mine) and _implied_schedule(theirs))
            ]  # fmt: skip
            changes += overlap_changes(mine, theirs)
            changed = ", ".join(changes)
            reasons.append(
                f"the pick changes {changed or 'nothing it searches'} and saves {saved:.2f} s "
                f"of {part.removesuffix('_time_s').replace('_', ' ')}"
            )
        if self.held is not None and self.held.steps:
            reasons.append(self._held_text(self.held))
        best_s = self.best_step_s
        if self.feasible and best_s is not None and not self.pick_as_fast:
            opts = self.item.case.options
            unsearched = [
                what for what, used in (
                    ("a hand-set stage layout", opts.chunk_layers is not None),
                    (f"block recompute of {opts.recompute_layers} layers",
                     opts.recompute_layers is not None),
                ) if used
            ]  # fmt: skip
            uses = f" ({', '.join(unsearched)})" if unsearched else ""
            reasons.append(
                f"the published layout is predicted {1 - self.published_step_s / best_s:.1%} "
                f"faster than the pick: it uses options the planner does not search{uses}"
            )
        if reasons and self.item.unmodelled:
            reasons.append("not modelled: " + "; ".join(self.item.unmodelled))
        return "; ".join(reasons)

    def _held_text(self, held: Pick) -> str:
        z = self.published_zero
        as_published = ZERO_AS_PUBLISHED.get(z, "as published")
        rank = rank_in(held, self.published_step_s)
        gap = gap_to(held, self.published_step_s)
        where = f"ranks {rank}" if rank is not None else f"is not in the top {held.top_k}"
        verdict = "check 2 holds" if top_or_close(held, self.published_step_s) else "still fails"
        on = self.published_choice.get("overlap", "none")
        software = ", ".join(
            f"{dim} {' or '.join(_pin_text(v) for v in values)}"
            for dim, values in self.item.software.items()
        )
        also = f" and its software's options ({software})" if software else ""
        return (
            f"held to ZeRO-{z} ({as_published}) and the run's overlaps ({on}){also}, the "
            f"published layout {where}, {gap:+.1%} from that best: {verdict}"
        )


def _pin_text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value)) or "no modules"
    return str(value)


def check(
    item: Published,
    planner: Callable[[Published], Pick],
    held_planner: Callable[[Published], Pick] | None = None,
    completer: Callable[[Published], Pick] | None = None,
) -> Check:
    """Price the published layout as stated and run the planner on the same question; where
    check 2 fails and the pick changes the ZeRO stage, ask ``held_planner`` (the planner held
    to the published stage) too. Where the source leaves choices unprinted and a ``completer``
    (the planner held to the printed ones, ``engine_planner(complete=True)``) is given, its
    best is the published layout."""
    c, m = item.case, item.memory_case
    spec, hw = load_model(c.model), load_hardware(c.hardware)
    capacity = hw.memory_bytes.value
    pick = planner(item)
    if item.unstated and completer is not None:
        done = completer(item)
        if done.steps:
            ch = Check(
                item, None, done.memory_bytes[0], capacity, done.step_times_s[0], done.steps[0],
                pick, completed=done,
            )  # fmt: skip
        else:
            st = step_time(spec, hw, c.layout, c.run, c.options)
            what = ", ".join(item.unstated)
            ch = Check(
                item, f"no completion of the printed layout fits ({what} searched)",
                float("nan"), capacity, st.step_time_s, st, pick, completed=done,
            )  # fmt: skip
        return _held(ch, held_planner)
    counts = hand_split(c.options, spec.num_hidden_layers, c.layout.pp, c.run.vpp)
    problems = layout_problems(spec, m.layout, m.run, by_hand=counts is not None)
    memory = worst_rank_bytes(spec, m.layout, m.run, counts, block=c.options.recompute_layers)
    problem = "; ".join(problems) if problems else None
    if problem is None and memory > capacity:
        problem = f"needs {memory / GB:.1f} GB per rank of {capacity / GB:.0f} GB"
    st = step_time(spec, hw, c.layout, c.run, c.options)
    return _held(Check(item, problem, memory, capacity, st.step_time_s, st, pick), held_planner)


def _held(ch: Check, held_planner: Callable[[Published], Pick] | None) -> Check:
    """The check with the planner held to the run's settings, where check 2 fails and the pick
    changes the ZeRO stage or an overlap."""
    pick, item = ch.pick, ch.item
    changed = bool(pick.choices) and (
        pick.choices[0]["ZeRO"] != ch.published_zero
        or bool(overlap_changes(ch.published_choice, pick.choices[0]))
        or bool(item.software)  # the pick may use what the run's software did not have
    )
    if held_planner is not None and changed and not ch.in_top_or_close:
        ch = replace(ch, held=held_planner(item))
    return ch


def published_settings(item: Published) -> dict[str, list]:
    """The pins that hold the planner to the run's own settings: its ZeRO stage (Megatron FSDP
    as ZeRO-3) and which communication it overlaps (``overlap_flags``), as ``tpcalc validate``
    prices the run (``recipe_options``), and what its software offered (``Published.software``)."""
    flags = overlap_flags(item.case.options)
    pins: dict[str, list] = {"zero": [int(item.memory_case.layout.zero)]}
    return pins | {_OVERLAP_PINS[d]: [on] for d, on in flags.items()} | item.software


def engine_planner(
    top_k: int = TOP_K, *, hold_published: bool = False, complete: bool = False
) -> Callable[[Published], Pick]:
    """The planner (``tpcalc.calc.plan``) on a published run's question: same model, hardware,
    GPUs, NVLink domain, sequence, global batch, dtype, state recipe (the published layout's
    memory recipe: FP8 primary weights where the recipe sets them), memory techniques (those the
    published layout is judged with: activation offloading where the recipe sets it),
    stage-split rule (the recipe's embedding and loss accounting), pipeline sends (scattered over
    the TP ranks where the recipe says so) and MoE dispatch (node-aware
    where the recipe's dispatcher is flex, as ``tpcalc validate`` prices the published layout);
    the layout, ZeRO stage, recompute and overlaps searched (the stage and overlaps pinned to the
    run's with ``hold_published``: ``published_settings``). With ``complete``, every printed
    choice is pinned and only the row's unstated ones searched (``completion_pins``)."""

    def run(item: Published) -> Pick:
        from tpcalc.calc.plan.request import build_request
        from tpcalc.calc.plan.search import plan

        c, m = item.case, item.memory_case
        pins = (
            completion_pins(item) if complete
            else published_settings(item) if hold_published else None
        )  # fmt: skip
        request = build_request(
            load_model(c.model), load_hardware(c.hardware), gpus=c.gpus, seq=c.run.seq,
            global_batch=item.global_batch, gpus_per_node=c.layout.gpus_per_node,
            recipe=m.run.recipe, dtype=c.run.dtype, memory=m.run.memory,
            top_k=top_k, pins=pins,
            time_options=TimeOptions(
                overlap=c.options.overlap, embedding_in_split=c.options.embedding_in_split,
                loss_in_split=c.options.loss_in_split, ep_node_dedup=c.options.ep_node_dedup,
                pp_scatter_gather=c.options.pp_scatter_gather,
            ),
        )  # fmt: skip
        result = plan(request)
        return Pick(
            tuple(choice(cand.layout, cand.run, cand.options) for cand in result.top),
            tuple(cand.step_time_s for cand in result.top),
            tuple(cand.step for cand in result.top),
            top_k,
            tuple(cand.memory_bytes for cand in result.top),
        )

    return run


def published_items(
    ids: set[str] | None = None, runs: Path | None = None
) -> tuple[list[Published], list[str]]:
    """Every computable published run of the shipped table, or of ``runs`` (a runs file in its
    schema, e.g. the held-out tpcalc/validation/heldout.yaml), or those of them in ``ids``; and
    why the others are skipped."""
    items, skipped = [], []
    for row in load_runs(runs):
        if ids is not None and row["id"] not in ids:
            continue
        got = published(row)
        if isinstance(got, str):
            skipped.append(got)
        else:
            items.append(got)
    return items, skipped


def checks(
    ids: set[str] | None = None,
    planner: Callable[[Published], Pick] | None = None,
    held_planner: Callable[[Published], Pick] | None = None,
    runs: Path | None = None,
) -> tuple[list[Check], list[str]]:
    """Every computable published run checked (``check``), of the shipped table or of ``runs``;
    the planner, the planner held to the published ZeRO stage and the one that completes unstated
    choices are the engine's unless a planner is given."""
    items, skipped = published_items(ids, runs)
    run = planner or engine_planner()
    held = held_planner if planner is not None else engine_planner(hold_published=True)
    completer = None if planner is not None else engine_planner(complete=True)
    return [check(i, run, held, completer) for i in items], skipped


def _row(ch: Check) -> Row:
    c = ch.item.case
    inputs: dict[str, Scalar] = {
        "id": c.id, "model": c.model, "hardware": c.hardware, "gpus": c.gpus, "seq": c.run.seq,
        "global_batch": ch.item.global_batch,
        "published": ch.published_text(),
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
        term("held_top_or_close", "check 2, ZeRO and overlaps as published",
             ch.held_in_top_or_close, Unit.text,
             formula="top k or gap <= 5% with the planner's ZeRO stage and overlaps pinned to "
             "the run's (asked where check 2 fails and the pick changes one of them)",
             source=SRC_CHECKS),
        term("why", "why not", ch.why(), Unit.text, formula="", source=ch.item.case.source),
    ]  # fmt: skip
    return Row(inputs=inputs, terms=tuple(terms))


def published_report(
    ids: set[str] | None = None, planner: Callable[[Published], Pick] | None = None
) -> Report:
    """One row per published run: the checks and, where one fails, why."""
    done, skipped = checks(ids, planner)
    held = sum(1 for ch in done if ch.holds)
    pinned = sum(1 for ch in done if ch.holds_when_held)
    return Report(
        title="The planner against published layouts (issue 11 §3)",
        rows=tuple(_row(ch) for ch in done),
        warnings=tuple(f"skipped {s}" for s in skipped),
        notes=(
            f"{held} of {len(done)} published runs pass all three checks",
            f"all three hold for {pinned} more once the planner is held to the run's ZeRO stage "
            "and overlaps",
        ),
    )
