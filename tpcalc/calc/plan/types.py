"""The planner's request and its typed results (base units, unit in every field name).

A ``PlanRequest`` says what to plan (model, hardware, GPUs, sequence, global batch) and how to
restrict the search (pins, bounds, headroom); a ``PlanResult`` holds the best layouts as
``Candidate`` values, each priced by exactly the functions ``tpcalc layout`` uses
(``calc.layout.memory.rank_memory``, ``calc.time.step.step_time``), the memory-versus-time Pareto
front, and the bookkeeping of the search (enumerated, feasible, timed exactly, rejections).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import Enum

from msgspec import Struct, field

from tpcalc.calc.layout.groups import LayoutRun, MemoryTechniques, ParallelLayout
from tpcalc.calc.plan.inverse import MinGpus, memory_budget_bytes
from tpcalc.calc.time.step import StepTime, TimeOptions
from tpcalc.choices import PARETO_WITHIN, ActivationModel, StateRecipe
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.units import Dtype

# The dimensions and options a request may pin (a tuple of allowed values) or bound (a maximum).
# Values: ints for sizes; ZeroStage ints 0-3 for "zero"; Recompute values ("none", "selective",
# "full") for "recompute"; tuples of Megatron module names for "recompute_modules"; bools for
# "sp" and the overlap flags; Schedule values for "schedule".
SIZE_DIMS = ("tp", "cp", "pp", "dp", "ep", "etp", "vpp", "micro_batch")
OPTION_DIMS = (
    "zero",
    "recompute",
    "recompute_modules",
    "sp",
    "schedule",
    "tp_comm_overlap",
    "cp_overlap",
    "ep_overlap",
    "pp_overlap",
    "dp_overlap",
)
PIN_DIMS = SIZE_DIMS + OPTION_DIMS


# Called by a search as it goes: (phase, fraction of that phase done in [0, 1]). Phases, in
# order: "screen" (divisibility and memory), "bounds", "top", "pareto"; "bounds" and "pareto"
# again, in that order, when the results need groups whose bounds were deferred (search._settled).
# For a caller's progress display (issue 11: "a rich progress bar when a search will take more
# than about a second").
ProgressCallback = Callable[[str, float], None]


class Objective(str, Enum):
    """What the planner ranks by."""

    time = "time"  # shortest predicted step time (default)
    memory = "memory"  # lowest peak memory per rank; step time breaks ties
    gpus = "gpus"  # fewest GPUs whose best step time meets target_step_time_s


class PlanRequest(Struct, frozen=True, kw_only=True):
    """Everything the planner needs; sizes in counts, memory in bytes, time in seconds.

    ``pins`` maps a name of ``PIN_DIMS`` to the values allowed (``{"tp": (8,), "pp": (1, 2, 4)}``);
    ``bounds`` maps a name of ``SIZE_DIMS`` to its largest allowed value (``{"tp": 4}``). The usable
    memory of a card is ``card · (1 − memory_headroom) − reserve_bytes``.
    """

    spec: ModelSpec
    hw: HardwareSpec
    gpus: int
    seq: int
    global_batch: int  # sequences per step: dp · micro_batch · microbatches
    pins: dict[str, tuple] = field(default_factory=dict)
    bounds: dict[str, int] = field(default_factory=dict)
    memory_headroom: float = 0.0  # fraction of the card kept free
    reserve_bytes: float = 0.0  # bytes kept free (framework, NCCL, fragmentation)
    objective: Objective = Objective.time
    target_step_time_s: float | None = None  # objective gpus: the step time to reach
    top_k: int = 10
    include_all: bool = False  # price every feasible layout exactly (for spreadsheets)
    pareto_within: float = PARETO_WITHIN  # the front's points: at most this × the best step
    tp_within_node: bool = True  # default: TP stays inside a node (seed 000: "TP 只放机内")
    allow_uneven: bool = True  # layers need not divide evenly over pp·vpp (as `tpcalc layout`)
    gpus_per_node: int | None = None  # None: the hardware config's
    # Fixed modelling choices of every candidate (not searched), as `tpcalc layout` takes them.
    recipe: StateRecipe = StateRecipe.zero16
    dtype: Dtype = Dtype.bf16
    activations: ActivationModel = ActivationModel.exact
    memory: MemoryTechniques = field(default_factory=MemoryTechniques)  # its recompute_modules
    # are replaced by the searched ones
    time_options: TimeOptions = field(default_factory=TimeOptions)  # its overlap is searched

    @property
    def capacity_bytes(self) -> float:
        """The usable memory of a card (``inverse.memory_budget_bytes``)."""
        return memory_budget_bytes(
            self.hw.memory_bytes.value, self.memory_headroom, self.reserve_bytes
        )


class Candidate(Struct, frozen=True, kw_only=True):
    """One layout, priced exactly as ``tpcalc layout`` prices it (same functions, same inputs)."""

    layout: ParallelLayout
    run: LayoutRun
    options: TimeOptions
    memory_bytes: float  # the most loaded pipeline rank: states + activations (with the
    # recompute working set) + buffers
    worst_pp_rank: int
    card_memory_bytes: float
    capacity_bytes: float  # card · (1 − headroom) − reserve
    step_time_s: float
    tokens_per_s_per_gpu: float
    mfu_ratio: float
    dominant_part: str  # the largest part of the step (a name of calc.time.step.STEP_PARTS)
    dominant_time_s: float
    step: StepTime  # the whole breakdown

    @property
    def memory_fraction(self) -> float:
        """Peak memory per rank / card."""
        return self.memory_bytes / self.card_memory_bytes

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.capacity_bytes


class BestMargin(Struct, frozen=True, kw_only=True):
    """Why the best beats the runner-up, from the two step breakdowns (calc.time.step
    STEP_PARTS): the part where the best saves most, and the part where it spends most extra."""

    step_gain_s: float  # runner-up step time − best step time
    gained_part: str
    gained_s: float
    lost_part: str | None  # None: the best is no slower in any part
    lost_s: float


class PlanResult(Struct, frozen=True, kw_only=True):
    """The best layouts, the Pareto front and how the search got there.

    ``rejections`` counts the layouts turned down per reason ("divisibility: <rule>", "memory",
    "batch", and "kernel: cp needs flash attention" under eager attention); they add up to
    ``enumerated − feasible``.
    """

    request: PlanRequest
    gpus: int  # the GPU count planned for (objective gpus: the smallest that meets the target)
    top: tuple[Candidate, ...]
    pareto: tuple[Candidate, ...]  # memory ascending, each strictly faster than the previous
    all_feasible: tuple[Candidate, ...]  # only with include_all
    enumerated: int
    feasible: int
    timed_exactly: int  # exact step_time calls
    rejections: tuple[tuple[str, int], ...]
    why_best: str  # one line in words: why the best beats the runner-up ("" with fewer than two)
    why: BestMargin | None = None  # the same, in seconds, for the renderer
    fewest: MinGpus | None = None  # objective gpus: every GPU count tried and the answer
    # a lower bound on the per-rank memory of every layout that divides (the memory screen's
    # least slab floor, ``fit.MemoryScreen.group_slabs``); inf when none divides. When nothing
    # fits, it says how far the closest layout is from the card.
    memory_floor_bytes: float = math.inf

    @property
    def best(self) -> Candidate | None:
        return self.top[0] if self.top else None
