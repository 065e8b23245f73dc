"""tpcalc plan: search every layout of a model on N GPUs and rank them; or answer an inverse
question on one layout (--max-seq, --largest-micro-batch).

The command's Python twins are ``tpcalc.plan`` (``tpcalc.reports.plan.plan``) and
``tpcalc.reports.plan_inverse``; ``tpcalc.reports.plan_view`` arranges the result into tables.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tpcalc.choices import (
    PARETO_WITHIN,
    ActivationModel,
    AttentionKernel,
    LossKernel,
    MoeDispatcher,
    PlanObjective,
    Recompute,
    RouterDtype,
    Schedule,
    StateRecipe,
)
from tpcalc.cli.common import emit, input_errors, warn
from tpcalc.cli.options import (
    DEFAULT_HARDWARE,
    DEFAULT_MODEL,
    DtypeOpt,
    ExplainOpt,
    FormatOpt,
    HardwareOpt,
    ModelOpt,
    SeqOpt,
    UnitsOpt,
)
from tpcalc.cli.parallel_options import (
    ActivationsOpt,
    AttentionOpt,
    CapacityFactorOpt,
    DispatcherOpt,
    DropoutOpt,
    Fp8CacheOpt,
    Fp8LinearInputsOpt,
    GpusPerNodeOpt,
    LossKernelOpt,
    MtpOpt,
    OffloadLayersOpt,
    ProbsInActOpt,
    RouterDtypeOpt,
    StateRecipeOpt,
    UnevenOpt,
)
from tpcalc.cli.request import memory_techniques, techniques_of
from tpcalc.cli.time_options import AccountEmbeddingOpt, AccountLossOpt
from tpcalc.errors import TpcalcError
from tpcalc.render import Format
from tpcalc.units import GB, ByteUnits, Dtype

if TYPE_CHECKING:
    from tpcalc.calc.time.step import TimeOptions
    from tpcalc.reports.request import Workload

app = typer.Typer()

# A search that has not finished after this long gets a progress display on stderr (issue 11:
# "a rich progress bar when a search will take more than about a second").
PROGRESS_AFTER_S = 1.0
# The options that pin a dimension to a list (flag -> parameter), the overlap and SP switches
# that pin one value, and the bounds (--max-* parameter -> the engine's bound name).
PIN_LISTS = {
    "--tp": "tp", "--cp": "cp", "--pp": "pp", "--dp": "dp", "--ep": "ep", "--etp": "etp",
    "--vpp": "vpp", "--micro-batch": "micro_batch", "--zero": "zero",
}  # fmt: skip
PIN_SWITCHES = ("sp", "tp_comm_overlap", "dp_overlap", "cp_overlap", "ep_overlap", "pp_overlap")
MAXIMA = {
    "max_tp": "tp", "max_cp": "cp", "max_pp": "pp", "max_ep": "ep", "max_vpp": "vpp",
    "max_micro_batch": "micro_batch",
}  # fmt: skip


def _list(flag: str, what: str) -> Any:
    return typer.Option(flag, help=f"Pin {what}: one value or a list (e.g. {flag} 1,2,4).")


def _bound(flag: str, what: str) -> Any:
    return typer.Option(flag, help=f"Largest {what} the search may use.")


def _flag(flag: str, what: str) -> Any:
    name = flag.removeprefix("--")
    return typer.Option(f"{flag}/--no-{name}", help=f"Pin {what} on or off. Default: searched.")


GpusOpt = Annotated[
    int, typer.Option("--gpus", "-g", help="GPUs in the job (world size). Required.")
]
GlobalBatchOpt = Annotated[
    int | None,
    typer.Option("--global-batch", help="Sequences per step: dp · micro-batch · micro-batches."),
]
GlobalTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--global-batch-tokens",
        help="Tokens per step instead of --global-batch (a whole number of --seq sequences).",
    ),
]
HeadroomOpt = Annotated[
    float,
    typer.Option(
        "--memory-headroom",
        help="Share of the card kept free (allocator fragmentation, CUDA context), e.g. 0.1.",
    ),
]
ReserveOpt = Annotated[
    float, typer.Option("--reserve-gb", help="GB (1e9 bytes) per card kept free, e.g. 4.")
]
ObjectiveOpt = Annotated[
    PlanObjective,
    typer.Option(
        "--objective",
        help="Rank by step 'time' (default), by 'memory' per rank, or find the fewest 'gpus' "
        "(up to --gpus) whose best layout reaches --target-step-time.",
    ),
]
TargetOpt = Annotated[
    float | None,
    typer.Option("--target-step-time", help="Seconds per step to reach (--objective gpus)."),
]
TopOpt = Annotated[int, typer.Option("--top", help="How many of the best layouts to list.")]
ParetoWithinOpt = Annotated[
    float,
    typer.Option(
        "--pareto-within",
        help="The Pareto front's slowest point: at most this many times the best step time "
        "(0: the whole front, down to the least memory at any speed; --objective memory ranks "
        "by memory alone).",
    ),
]
AllOpt = Annotated[
    bool,
    typer.Option(
        "--all", help="List every feasible layout (use with --format csv for a spreadsheet)."
    ),
]
MaxSeqOpt = Annotated[
    bool,
    typer.Option(
        "--max-seq",
        help="Instead of searching: the longest sequence that fits the one layout given by the "
        "pins (--tp, --cp, --pp, ... one value each; dp = gpus / (tp·cp·pp)).",
    ),
]
LargestMbOpt = Annotated[
    bool,
    typer.Option(
        "--largest-micro-batch",
        help="Instead of searching: the largest micro-batch that fits the one layout given by "
        "the pins (micro-batches per step follow from --global-batch).",
    ),
]
TpWithinNodeOpt = Annotated[
    bool,
    typer.Option(
        "--tp-within-node/--tp-across-nodes",
        help="Keep TP inside a node (seed 000: TP 只放机内), or let the search cross nodes.",
    ),
]
ListOpt = Annotated[str | None, typer.Option()]


def _ints(value: str | None, option: str) -> tuple[int, ...] | None:
    from tpcalc.reports.inputs import int_list

    return None if value is None else tuple(int_list(value, option, []))


def _words(value: str | None, option: str, enum: type) -> tuple[str, ...] | None:
    if value is None:
        return None
    words = tuple(w.strip() for w in value.split(",") if w.strip())
    valid = [str(e.value) for e in enum]  # type: ignore[attr-defined]
    bad = [w for w in words if w not in valid]
    if bad or not words:
        raise TpcalcError(
            f"{option} {value!r}: give one or more of {', '.join(valid)} separated by commas"
        )
    return words


def _bounded(value: int, option: str, most: int, what: str) -> int:
    if not 1 <= value <= most:
        raise TpcalcError(f"{option} must be between 1 and {most:,} ({what}), got {value:,}")
    return value


def _run_with_progress(work: Callable[[], Any], fmt: Format) -> Any:
    """Run ``work``; if it is still going after PROGRESS_AFTER_S, show a progress display on
    stderr (a terminal only; nothing on stdout whatever the format)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(PROGRESS_AFTER_S)
    if thread.is_alive() and sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(file=sys.stderr)
        columns = (TextColumn("searching layouts"), BarColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            progress.add_task("plan", total=None)
            while thread.is_alive():
                thread.join(0.1)
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


@app.command()
def plan(
    ctx: typer.Context,
    gpus: GpusOpt,
    model: ModelOpt = DEFAULT_MODEL,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    seq: SeqOpt = None,
    global_batch: GlobalBatchOpt = None,
    global_batch_tokens: GlobalTokensOpt = None,
    tp: Annotated[str | None, _list("--tp", "the tensor-parallel size")] = None,
    cp: Annotated[str | None, _list("--cp", "the context-parallel size")] = None,
    pp: Annotated[str | None, _list("--pp", "the pipeline-parallel size")] = None,
    dp: Annotated[str | None, _list("--dp", "the data-parallel size")] = None,
    ep: Annotated[str | None, _list("--ep", "the expert-parallel size")] = None,
    etp: Annotated[str | None, _list("--etp", "the expert tensor-parallel size")] = None,
    vpp: Annotated[str | None, _list("--vpp", "the model chunks per rank")] = None,
    micro_batch: Annotated[str | None, _list("--micro-batch", "the micro-batch")] = None,
    zero: Annotated[str | None, _list("--zero", "the ZeRO stage (0-3)")] = None,
    recompute: Annotated[
        str | None, _list("--recompute", "recompute (none, selective, full)")
    ] = None,
    recompute_modules: Annotated[
        str | None,
        typer.Option(
            "--recompute-modules",
            help="Pin one Megatron fine-grained recompute set, e.g. layernorm,moe_act "
            "('none' for no modules).",
        ),
    ] = None,
    schedule: Annotated[
        str | None, _list("--schedule", "the schedule (1f1b, interleaved, zb-h1, ...)")
    ] = None,
    sp: Annotated[bool | None, _flag("--sp", "sequence parallelism")] = None,
    tp_comm_overlap: Annotated[bool | None, _flag("--tp-comm-overlap", "TP overlap")] = None,
    dp_overlap: Annotated[bool | None, _flag("--dp-overlap", "DP overlap")] = None,
    cp_overlap: Annotated[bool | None, _flag("--cp-overlap", "the CP ring's overlap")] = None,
    ep_overlap: Annotated[
        bool | None,
        _flag(
            "--ep-overlap",
            "the EP all-to-all's overlap (Megatron moe_a2a_overlap; searched on only where "
            "Megatron-Core allows it: not with full recompute, the moe module, or pp > 1 "
            "without vpp)",
        ),
    ] = None,
    pp_overlap: Annotated[bool | None, _flag("--pp-overlap", "PP send/recv overlap")] = None,
    max_tp: Annotated[int | None, _bound("--max-tp", "tensor-parallel size")] = None,
    max_cp: Annotated[int | None, _bound("--max-cp", "context-parallel size")] = None,
    max_pp: Annotated[int | None, _bound("--max-pp", "pipeline-parallel size")] = None,
    max_ep: Annotated[int | None, _bound("--max-ep", "expert-parallel size")] = None,
    max_vpp: Annotated[int | None, _bound("--max-vpp", "model chunks per rank")] = None,
    max_micro_batch: Annotated[int | None, _bound("--max-micro-batch", "micro-batch")] = None,
    memory_headroom: HeadroomOpt = 0.0,
    reserve_gb: ReserveOpt = 0.0,
    objective: ObjectiveOpt = PlanObjective.time,
    target_step_time: TargetOpt = None,
    top: TopOpt = 10,
    pareto_within: ParetoWithinOpt = PARETO_WITHIN,
    all_layouts: AllOpt = False,
    max_seq: MaxSeqOpt = False,
    largest_micro_batch: LargestMbOpt = False,
    tp_within_node: TpWithinNodeOpt = True,
    gpus_per_node: GpusPerNodeOpt = None,
    dtype: DtypeOpt = Dtype.bf16,
    recipe: StateRecipeOpt = StateRecipe.zero16,
    activations: ActivationsOpt = ActivationModel.exact,
    fp8_cache: Fp8CacheOpt = False,
    dropout: DropoutOpt = None,
    attention: AttentionOpt = AttentionKernel.flash,
    fp8_linear_inputs: Fp8LinearInputsOpt = None,
    moe_probs_in_act: ProbsInActOpt = True,
    mtp: MtpOpt = True,
    offload_layers: OffloadLayersOpt = 0,
    moe_dispatcher: DispatcherOpt = MoeDispatcher.alltoall,
    loss_kernel: LossKernelOpt = LossKernel.fp32_copy,
    capacity_factor: CapacityFactorOpt = None,
    router_dtype: RouterDtypeOpt = RouterDtype.fp32,
    uneven: UnevenOpt = True,
    account_for_embedding: AccountEmbeddingOpt = False,
    account_for_loss: AccountLossOpt = False,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
) -> None:
    """Find the best layout: every TP, CP, PP, VPP, DP, EP, ETP, ZeRO stage, micro-batch,
    recompute mode, SP, schedule and overlap that divides, fits the card and makes the global
    batch, ranked by the step-time model of 'tpcalc layout'. Prints the top layouts (memory per
    rank against the card, step time, tokens/s/GPU, MFU, what dominates), the memory-versus-time
    Pareto front, how many layouts were evaluated, feasible and rejected per reason, and why the
    best beats the runner-up. --format json|csv carries the top layouts (--all: every feasible
    one); --explain explains the best exactly as 'tpcalc layout --explain' does.

    Examples:

    \b
      tpcalc plan -m llama3-70b --gpus 64 --seq 8192 --global-batch 128

    \b
      tpcalc plan -m llama3-405b --gpus 16384 --seq 8192 --global-batch 2048 \\
        --tp 8 --pp 8,16

    \b
      tpcalc plan -m deepseek-v3 --hardware h800 --gpus 2048 --seq 4096 \\
        --global-batch 15360 --memory-headroom 0.1 --top 5

    \b
      tpcalc plan -m llama3-70b --gpus 1024 --seq 8192 --global-batch 512 \\
        --objective gpus --target-step-time 2.0

    \b
      tpcalc plan -m llama3-8b --gpus 64 --seq 8192 --global-batch 128 --all \\
        --format csv

    The run's memory techniques apply to every candidate, as in 'tpcalc layout'; any overlap
    can be pinned (here: a framework without the EP all-to-all overlap):

    \b
      tpcalc plan -m deepseek-v3 --hardware h800 --gpus 256 --seq 4096 \\
        --global-batch 1920 --no-mtp --no-ep-overlap --offload-layers 2

    A DeepEP / HybridEP run (Megatron-Core --moe-token-dispatcher-type flex): every candidate's
    dispatch sends a token over the network once per remote node, as 'tpcalc layout
    --moe-dispatcher flex' prices it:

    \b
      tpcalc plan -m qwen3-30b-a3b --gpus 16 --seq 4096 --global-batch 64 \\
        --moe-dispatcher flex

    Layers split as Megatron-Bridge's Llama 3.1 405B recipe splits them (the embedding and the
    loss each count as a layer: pp·vpp may reach 128 for 126 layers):

    \b
      tpcalc plan -m llama3-405b --hardware gb200 --gpus 256 --seq 8192 \\
        --global-batch 1536 --dtype fp8 --zero 1 \\
        --account-for-embedding-in-pipeline-split \\
        --account-for-loss-in-pipeline-split

    Inverse questions on one layout (pins with one value each):

    \b
      tpcalc plan -m llama3-405b --gpus 16384 --tp 8 --pp 16 --zero 1 \\
        --global-batch 2048 --max-seq

    \b
      tpcalc plan -m llama3-405b --gpus 16384 --tp 8 --pp 16 --zero 1 \\
        --seq 8192 --global-batch 2048 --largest-micro-batch

    \b
      tpcalc plan -m llama3-405b --gpus 16384 --tp 8 --pp 16 --vpp 8 \\
        --zero 1 --global-batch 2048 --max-seq \\
        --account-for-embedding-in-pipeline-split \\
        --account-for-loss-in-pipeline-split
    """
    params = ctx.params
    techniques = techniques_of(params)  # the memory techniques, as every command reads them
    with input_errors():
        pins = _pins(
            {flag: params[name] for flag, name in PIN_LISTS.items()}, recompute, schedule,
            recompute_modules, {name: params[name] for name in PIN_SWITCHES},
        )  # fmt: skip
    maxima = {field: params[name] for name, field in MAXIMA.items()}
    if max_seq or largest_micro_batch:
        _inverse(
            model, hardware, gpus=gpus, pins=pins, seq=seq, global_batch=global_batch,
            headroom=memory_headroom, reserve_gb=reserve_gb, gpus_per_node=gpus_per_node,
            recipe=recipe, dtype=dtype, max_seq=max_seq, fmt=fmt, units=units,
            ends=(account_for_embedding, account_for_loss), techniques=techniques,
        )  # fmt: skip
        return
    options = _engine_options(
        pins, maxima, global_batch=global_batch, global_batch_tokens=global_batch_tokens,
        memory_headroom=memory_headroom, reserve_gb=reserve_gb, top_k=top,
        include_all=all_layouts, pareto_within=pareto_within, tp_within_node=tp_within_node,
        allow_uneven=uneven, gpus_per_node=gpus_per_node,
        ends=(account_for_embedding, account_for_loss),
    )  # fmt: skip
    workload = dict(seq=seq, recipe=recipe, dtype=dtype, activations=activations)
    question = _Question(model, hardware, gpus, workload, techniques, options, objective,
                         target_step_time)  # fmt: skip
    with input_errors():
        result, counts = _run_with_progress(question.search, fmt)
    for note in question.notes:  # the workload's warnings (defaulted seq, FP8 storage)
        warn(note)
    if counts is not None and fmt is Format.table:
        emit(lambda: counts, fmt, units=units)
    _print(
        result, model, hardware, fmt=fmt, units=units, explain=explain, every=all_layouts, top=top
    )


def _engine_options(
    pins: dict[str, Any], maxima: dict[str, int | None], *, global_batch: int | None,
    global_batch_tokens: int | None, memory_headroom: float, reserve_gb: float, top_k: int,
    include_all: bool, pareto_within: float | None, tp_within_node: bool, allow_uneven: bool,
    gpus_per_node: int | None, ends: tuple[bool, bool],
) -> dict[str, Any]:  # fmt: skip
    """``tpcalc.plan``'s keyword options from the command line: the bounds given, the reserve
    in bytes, no Pareto limit for 0, and the layer split's ends when either is counted."""
    options: dict[str, Any] = dict(
        global_batch=global_batch, global_batch_tokens=global_batch_tokens, pins=pins,
        bounds={name: value for name, value in maxima.items() if value is not None},
        memory_headroom=memory_headroom, reserve_bytes=reserve_gb * GB, top_k=top_k,
        include_all=include_all, pareto_within=pareto_within or math.inf,
        tp_within_node=tp_within_node, allow_uneven=allow_uneven, gpus_per_node=gpus_per_node,
    )  # fmt: skip
    if (split := _split_options(*ends)) is not None:
        options["time_options"] = split
    return options


class _Question:
    """One ``plan`` question as the engine takes it: the workload (model, card, sequence,
    recipe, dtype, activations, memory techniques), the engine's options (pins, bounds,
    headroom, batch) and the objective; ``search`` answers it (in the progress thread) and
    keeps the workload's warnings for after the progress display."""

    def __init__(
        self, model: str, hardware: str, gpus: int, workload: dict[str, Any],
        techniques: dict[str, Any], options: dict[str, Any], objective: PlanObjective,
        target_step_time: float | None,
    ) -> None:  # fmt: skip
        self.model, self.hardware, self.gpus = model, hardware, gpus
        self.workload, self.techniques, self.options = workload, techniques, options
        self.objective, self.target_step_time = objective, target_step_time
        self.notes: list[str] = []

    def search(self) -> tuple[Any, Any]:
        """(result, the GPU counts tried or None): the top layouts, or the fewest GPUs that
        reach the target step time (``--objective gpus``)."""
        from tpcalc.reports.plan import plan_workload
        from tpcalc.reports.request import Workload

        o = self.options
        _check_sizes(self.model, self.gpus, o["top_k"], self.workload["seq"],
                     o["global_batch"], o["global_batch_tokens"])  # fmt: skip
        # micro-batch, SP and recompute are searched (pinned in the options), not the workload's
        work = Workload.load(
            self.model, self.hardware, **self.workload,
            memory=memory_techniques(None, **self.techniques),
        )  # fmt: skip
        self.notes.extend(work.warnings)
        if self.objective is not PlanObjective.gpus:
            return plan_workload(work, gpus=self.gpus, objective=self.objective.value, **o), None
        echo = {"model": self.model, "hardware": self.hardware}
        return _fewest_gpus(work, echo, self.gpus, self.target_step_time, o)


def _split_options(embedding: bool, loss: bool) -> TimeOptions | None:
    """The step model's options for a split that counts the embedding and/or the loss as
    layers (Megatron-Core's accounted split), or None for the planner's even split."""
    if not (embedding or loss):
        return None
    from tpcalc.calc.time.step import TimeOptions

    return TimeOptions(embedding_in_split=embedding, loss_in_split=loss)


def _pins(
    lists: dict[str, str | None], recompute: str | None, schedule: str | None,
    recompute_modules: str | None, switches: dict[str, bool | None],
) -> dict[str, Any]:  # fmt: skip
    """The planner's pins from the options: each list flag ('--tp 1,2,4') as a tuple of ints,
    the recompute and schedule words, one recompute-module set, and the on/off switches."""
    pins: dict[str, Any] = {
        flag.removeprefix("--").replace("-", "_"): values
        for flag, value in lists.items()
        if (values := _ints(value, flag)) is not None
    }
    if (words := _words(recompute, "--recompute", Recompute)) is not None:
        pins["recompute"] = words
    if (words := _words(schedule, "--schedule", Schedule)) is not None:
        pins["schedule"] = words
    if recompute_modules is not None:
        pins["recompute_modules"] = recompute_modules  # one set, "a,b" (request._pin_values)
    pins.update({name: (flag,) for name, flag in switches.items() if flag is not None})
    return pins


def _check_sizes(
    model: str, gpus: int, top: int, seq: int | None, global_batch: int | None,
    global_batch_tokens: int | None,
) -> None:  # fmt: skip
    """The sizes that keep one search within seconds, the engine's own limits
    (``calc.plan.request``: MAX_GPUS, MAX_TOP_K, MAX_GLOBAL_BATCH), checked with the options'
    names before anything is loaded."""
    from tpcalc.calc.plan.request import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_TOP_K
    from tpcalc.reports.inputs import positive

    _bounded(positive(gpus, "--gpus"), "--gpus", MAX_GPUS, "GPUs")
    _bounded(top, "--top", MAX_TOP_K, "layouts; --all lists every feasible one")
    if global_batch is not None:
        _bounded(positive(global_batch, "--global-batch"), "--global-batch",
                 MAX_GLOBAL_BATCH, "sequences")  # fmt: skip
    if global_batch_tokens is not None:
        from tpcalc.catalog import load_model

        tokens = positive(global_batch_tokens, "--global-batch-tokens")
        s = seq if seq is not None else load_model(model).seq_length
        _bounded(-(-tokens // max(s, 1)), "--global-batch-tokens / --seq", MAX_GLOBAL_BATCH,
                 "sequences")  # fmt: skip


def _fewest_gpus(
    work: Workload, echo: dict[str, Any], gpus: int, target: float | None, options: dict[str, Any]
) -> tuple[Any, Any]:
    """--objective gpus: the planner's fewest GPUs (up to --gpus) whose best layout reaches the
    target (``tpcalc.calc.plan.search.plan``: powers of two, then bisection over whole nodes);
    the plan at that count, and the counts tried as a report."""
    from tpcalc.reports.plan import plan_workload
    from tpcalc.reports.plan_inverse import min_gpus_report

    if target is None:
        raise TpcalcError("--objective gpus needs --target-step-time SECONDS, e.g. 2.0")
    if not target > 0:
        raise TpcalcError(f"--target-step-time must be a positive time in seconds; got {target}")
    result = plan_workload(work, gpus=gpus, objective="gpus", target_step_time_s=target, **options)
    title = f"Fewest GPUs for a {target:g} s step (best layout per count, up to {gpus:,})"
    if result.fewest is None:  # the engine fills it for objective gpus
        raise TpcalcError("--objective gpus: the planner returned no GPU counts")
    return result, min_gpus_report(title, echo, result.fewest, gpus)


def _print(
    result: Any, model: str, hardware: str, *, fmt: Format, units: ByteUnits, explain: bool,
    every: bool, top: int,
) -> None:  # fmt: skip
    from tpcalc.reports import plan_view as view

    if fmt is not Format.table:
        emit(lambda: view.all_report(result) if every else view.top_report(result, compact=False),
             fmt, units=units)  # fmt: skip
        return
    emit(lambda: view.top_report(result), fmt, units=units)
    if result.pareto:
        emit(lambda: view.pareto_report(result, max(top, 2)), fmt, units=units)
    emit(lambda: view.counts_report(result), fmt, units=units)
    if every:
        emit(lambda: view.all_report(result), fmt, units=units)
    best = result.best
    if best is None:
        return
    sys.stdout.write(f"Reproduce the best: {view.layout_command(model, hardware, best)}\n")
    if explain:
        for what in view.unrepresentable(best):
            sys.stderr.write(f"Warning: tpcalc layout has no option for {what}\n")
        emit(lambda: view.explain_layout(model, hardware, best), fmt, units=units, explain=True)


def _one(pins: dict[str, Any], name: str, default: Any) -> Any:
    values = pins.get(name)
    if values is None:
        return default
    if len(values) != 1:
        flag = "--" + name.replace("_", "-")
        raise TpcalcError(
            f"{flag}: --max-seq and --largest-micro-batch price one layout; give one value"
        )
    return values[0]


def _inverse(
    model: str, hardware: str, *, gpus: int, pins: dict[str, Any], seq: int | None,
    global_batch: int | None, headroom: float, reserve_gb: float, gpus_per_node: int | None,
    recipe: StateRecipe, dtype: Dtype, max_seq: bool, fmt: Format, units: ByteUnits,
    ends: tuple[bool, bool], techniques: dict[str, Any],
) -> None:  # fmt: skip
    def build():
        from tpcalc.reports.plan_inverse import max_micro_batch_report, max_seq_report
        from tpcalc.reports.request import Layout, Workload

        if global_batch is None:
            raise TpcalcError(
                "--max-seq and --largest-micro-batch need --global-batch (sequences per step: "
                "it sets the micro-batches in flight)"
            )
        tp, cp, pp = (_one(pins, d, 1) for d in ("tp", "cp", "pp"))
        if gpus % (tp * cp * pp):
            raise TpcalcError(f"--gpus {gpus} is not a multiple of tp·cp·pp = {tp * cp * pp}")
        dp = gpus // (tp * cp * pp)
        if _one(pins, "dp", dp) != dp:
            raise TpcalcError(f"--dp must be gpus / (tp·cp·pp) = {dp} for this layout")
        mb = _one(pins, "micro_batch", 1)
        vpp = _one(pins, "vpp", 1)
        sched = _one(pins, "schedule", "interleaved" if vpp > 1 else "1f1b")
        if global_batch % (dp * mb):
            raise TpcalcError(
                f"--global-batch {global_batch} is not a multiple of dp·micro-batch = {dp}·{mb}"
            )
        microbatches = global_batch // (dp * mb)
        modules = _one(pins, "recompute_modules", None)
        work = Workload.load(
            model, hardware, seq=None if max_seq else seq, micro_batch=mb,
            sp=_one(pins, "sp", True),
            recompute=Recompute(_one(pins, "recompute", Recompute.selective.value)),
            recipe=recipe, dtype=dtype,
            memory=memory_techniques(None if modules in (None, "none") else modules, **techniques),
        )  # fmt: skip
        split = Layout(
            tp=tp, cp=cp, pp=pp, dp=dp, ep=_one(pins, "ep", 1), etp=_one(pins, "etp", 1),
            zero=_one(pins, "zero", 1), vpp=vpp, schedule=Schedule(sched),
            microbatches=microbatches, gpus_per_node=gpus_per_node,
        )  # fmt: skip
        embedding, loss = ends  # Megatron-Core's accounted split (pipeline.accounted_split)
        budget = dict(headroom_ratio=headroom, reserve_bytes=reserve_gb * GB,
                      embedding_in_split=embedding, loss_in_split=loss)  # fmt: skip
        if max_seq:
            return max_seq_report(work, split, **budget)
        return max_micro_batch_report(work, split, global_batch=global_batch, **budget)

    emit(build, fmt, units=units)
