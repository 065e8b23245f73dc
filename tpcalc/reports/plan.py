"""Layout planner: the Python twin of ``tpcalc plan``.

``plan_workload`` turns a ``Workload`` (model, card, sequence, dtype, state recipe, activation
model, memory techniques) and the plan's own options (``PlanOptions``: GPUs, global batch, pins,
bounds, objective, ...) into a ``PlanRequest`` and runs ``tpcalc.calc.plan.search.plan``. The
workload's micro-batch, SP and recompute are not taken: the planner searches them (pin them in
``pins``). ``tpcalc.plan`` is ``plan``, which loads the workload by name first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, Required, TypedDict, TypeVar, Unpack

from tpcalc.choices import ActivationModel, StateRecipe
from tpcalc.errors import InputError
from tpcalc.units import Dtype

if TYPE_CHECKING:
    from tpcalc.calc.layout.groups import MemoryTechniques
    from tpcalc.calc.plan.types import Objective, PlanResult, ProgressCallback
    from tpcalc.calc.time.step import TimeOptions
    from tpcalc.reports.request import Workload
    from tpcalc.specs import HardwareSpec, ModelSpec

E = TypeVar("E", bound=Enum)


class PlanOptions(TypedDict, total=False):
    """The plan's own options (``tpcalc.calc.plan.request.build_request`` checks each one and
    holds its default): ``global_batch`` is in sequences; ``global_batch_tokens`` (tokens) is
    converted to sequences of the workload's ``seq`` and must divide. ``pins`` maps a dimension
    to one value or a sequence of allowed values (``{"tp": 8, "pp": (1, 2, 4)}``), ``bounds`` a
    size dimension to its maximum (``{"tp": 4}``)."""

    gpus: Required[int]
    global_batch: int | None
    global_batch_tokens: int | None
    pins: Mapping[str, Any] | None
    bounds: Mapping[str, int] | None
    memory_headroom: float
    reserve_bytes: float
    objective: str | Objective
    target_step_time_s: float | None
    top_k: int
    include_all: bool
    pareto_within: float
    tp_within_node: bool
    allow_uneven: bool
    gpus_per_node: int | None
    time_options: TimeOptions | None


def plan_workload(
    workload: Workload, progress: ProgressCallback | None = None, **options: Unpack[PlanOptions]
) -> PlanResult:
    """Plan ``workload`` under ``options``: the best layouts with their exact figures.
    Bad input raises ``InputError`` naming the field. ``progress(phase, fraction)`` is called
    as the search goes (``ProgressCallback``)."""
    from tpcalc.calc.plan.request import build_request
    from tpcalc.calc.plan.search import plan as search

    request = build_request(
        workload.spec, workload.hw, seq=workload.seq, recipe=workload.recipe,
        dtype=workload.dtype, activations=workload.activations, memory=workload.memory,
        **options,
    )  # fmt: skip
    return search(request, progress)


def _choice(enum: type[E], value: E | str, name: str) -> E:
    """``value`` as a member of ``enum``, or an InputError naming ``name`` and the members."""
    try:
        return enum(value)
    except ValueError:
        valid = ", ".join(str(e.value) for e in enum)
        raise InputError(f"{name}: {value!r} is not one of {valid}") from None


def plan(
    model: str | ModelSpec,
    hardware: str | HardwareSpec,
    *,
    seq: int | None = None,
    recipe: StateRecipe | str = StateRecipe.zero16,
    dtype: Dtype | str = Dtype.bf16,
    activations: ActivationModel | str = ActivationModel.exact,
    memory: MemoryTechniques | None = None,
    progress: ProgressCallback | None = None,
    **options: Unpack[PlanOptions],
) -> PlanResult:
    """Plan ``model`` on ``options["gpus"]`` × ``hardware`` (names, paths or loaded specs):
    ``plan_workload`` of the ``Workload`` these name (``seq=None``: the model's training
    length), e.g. ``tpcalc.plan("llama3-70b", "h100-sxm", gpus=64, seq=8192,
    global_batch=128)``."""
    from tpcalc.reports.request import Workload

    workload = Workload.load(
        model, hardware, seq=seq, recipe=_choice(StateRecipe, recipe, "recipe"),
        dtype=_choice(Dtype, dtype, "dtype"),
        activations=_choice(ActivationModel, activations, "activations"), memory=memory,
    )  # fmt: skip
    return plan_workload(workload, progress, **options)


__all__: Sequence[str] = ("PlanOptions", "plan", "plan_workload")
