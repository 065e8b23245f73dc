"""Layout planner: the Python twin of ``tpcalc plan``.

It loads the model and hardware (built-in names or paths), turns the user's inputs into a
``PlanRequest`` and runs ``tpcalc.calc.plan.search.plan``. ``tpcalc.plan`` is this function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpcalc.calc.layout.groups import MemoryTechniques
    from tpcalc.calc.plan.types import PlanResult, ProgressCallback
    from tpcalc.calc.time.step import TimeOptions


def plan(
    model: str,
    hardware: str,
    *,
    gpus: int,
    seq: int | None = None,
    global_batch: int | None = None,
    global_batch_tokens: int | None = None,
    pins: Mapping[str, Any] | None = None,
    bounds: Mapping[str, int] | None = None,
    memory_headroom: float = 0.0,
    reserve_bytes: float = 0.0,
    objective: str = "time",
    target_step_time_s: float | None = None,
    top_k: int = 10,
    include_all: bool = False,
    tp_within_node: bool = True,
    allow_uneven: bool = True,
    gpus_per_node: int | None = None,
    recipe: str = "zero16",
    dtype: str = "bf16",
    activations: str = "exact",
    memory: MemoryTechniques | None = None,
    time_options: TimeOptions | None = None,
    progress: ProgressCallback | None = None,
) -> PlanResult:
    """Plan ``model`` on ``gpus`` × ``hardware``: the best layouts with their exact figures.

    ``global_batch`` is in sequences; ``global_batch_tokens`` (tokens) is converted to
    sequences of ``seq`` tokens and must divide. ``pins`` maps a dimension to one value or a
    sequence of allowed values (``{"tp": 8, "pp": (1, 2, 4)}``), ``bounds`` a size dimension to
    its maximum (``{"tp": 4}``). Bad input raises ``InputError`` naming the field.
    ``progress(phase, fraction)`` is called as the search goes (``ProgressCallback``).
    """
    from tpcalc.calc.plan.request import build_request
    from tpcalc.calc.plan.search import plan as search
    from tpcalc.catalog import load_hardware, load_model

    spec, hw = load_model(model), load_hardware(hardware)
    request = build_request(
        spec, hw, gpus=gpus, seq=seq, global_batch=global_batch,
        global_batch_tokens=global_batch_tokens, pins=pins, bounds=bounds,
        memory_headroom=memory_headroom, reserve_bytes=reserve_bytes, objective=objective,
        target_step_time_s=target_step_time_s, top_k=top_k, include_all=include_all,
        tp_within_node=tp_within_node, allow_uneven=allow_uneven, gpus_per_node=gpus_per_node,
        recipe=recipe, dtype=dtype, activations=activations, memory=memory,
        time_options=time_options,
    )  # fmt: skip
    return search(request, progress)


__all__: Sequence[str] = ("plan",)
