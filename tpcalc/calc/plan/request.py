"""Turn the user's plan inputs into a validated ``PlanRequest`` (one-line ``InputError`` naming
the field for anything invalid)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from msgspec.structs import replace

from tpcalc.calc.dp.zero import zero_stage
from tpcalc.calc.layout.groups import MemoryTechniques, resolve_fp8_inputs
from tpcalc.calc.plan.types import OPTION_DIMS, PIN_DIMS, SIZE_DIMS, Objective, PlanRequest
from tpcalc.calc.time.step import RECOMPUTE_MODULE_OPS, TimeOptions
from tpcalc.choices import (
    PARETO_WITHIN,
    ActivationModel,
    MoeDispatcher,
    Recompute,
    Schedule,
    StateRecipe,
)
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.units import Dtype

BOOL_DIMS = ("sp", "tp_comm_overlap", "cp_overlap", "ep_overlap", "pp_overlap", "dp_overlap")

# The sizes that keep one search within seconds, for every caller (the CLI and tpcalc.plan):
# the GPU count and the global batch set how many shapes and micro-batch splits are enumerated
# (divisors of each), top_k how many layouts are priced exactly for the result. Beyond them a
# value is a typo, not a run: 2^20 GPUs is beyond any cluster built to date; 2^16 sequences per
# step is 32x DeepSeek-V3's 15,360 (DeepSeek-V3 report §4.2) and 32x Llama 3 405B's 2,048 at 8K
# (Llama 3 paper Table 4); more than 100 listed layouts is what `tpcalc plan --all` is for.
MAX_GPUS = 2**20
MAX_GLOBAL_BATCH = 2**16
MAX_TOP_K = 100


def _choice(enum: type, value: Any, name: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        valid = ", ".join(str(e.value) for e in enum)  # type: ignore[attr-defined]
        raise InputError(f"{name}: {value!r} is not one of {valid}") from None


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    return value


def _pin_values(dim: str, values: Any) -> tuple:
    """The allowed values of one pinned dimension, typed."""
    if isinstance(values, (str, int, bool)) or (dim == "recompute_modules" and _is_modules(values)):
        values = (values,)
    values = tuple(values)
    if not values:
        raise InputError(f"pin {dim}: give at least one value")
    if dim in SIZE_DIMS:
        return tuple(_positive_int(v, f"pin {dim}") for v in values)
    if dim == "zero":
        return tuple(zero_stage(v) for v in values)
    if dim == "recompute":
        return tuple(_choice(Recompute, v, "pin recompute") for v in values)
    if dim == "schedule":
        return tuple(_choice(Schedule, v, "pin schedule") for v in values)
    if dim == "recompute_modules":
        out = []
        for v in values:
            mods = tuple(v.split(",")) if isinstance(v, str) else tuple(v)
            mods = tuple(m for m in mods if m and m != "none")
            for m in mods:
                if m not in RECOMPUTE_MODULE_OPS:
                    valid = ", ".join(RECOMPUTE_MODULE_OPS)
                    raise InputError(f"pin recompute_modules: unknown module {m!r}; valid: {valid}")
            out.append(tuple(sorted(set(mods))))
        return tuple(out)
    if dim in BOOL_DIMS:
        for v in values:
            if not isinstance(v, bool):
                raise InputError(f"pin {dim}: give true or false, got {v!r}")
        return values
    raise InputError(f"pin {dim}: unknown dimension; valid: {', '.join(PIN_DIMS)}")


def _at_most(value: int, name: str, most: int, what: str) -> int:
    """``value`` if it is at most ``most``; else an InputError naming the field and the range."""
    if value > most:
        raise InputError(f"{name} must be between 1 and {most:,} ({what}), got {value:,}")
    return value


def _is_modules(values: Any) -> bool:
    """A single module set given as a tuple of names (not a tuple of sets, each a tuple of
    names or an "a,b" string)."""
    return isinstance(values, (tuple, list)) and all(
        isinstance(v, str) and "," not in v for v in values
    )


def build_request(
    spec: ModelSpec,
    hw: HardwareSpec,
    *,
    gpus: int,
    seq: int | None = None,
    global_batch: int | None = None,
    global_batch_tokens: int | None = None,
    pins: Mapping[str, Any] | None = None,
    bounds: Mapping[str, int] | None = None,
    memory_headroom: float = 0.0,
    reserve_bytes: float = 0.0,
    objective: str | Objective = Objective.time,
    target_step_time_s: float | None = None,
    top_k: int = 10,
    include_all: bool = False,
    pareto_within: float = PARETO_WITHIN,
    tp_within_node: bool = True,
    allow_uneven: bool = True,
    gpus_per_node: int | None = None,
    recipe: str | StateRecipe = StateRecipe.zero16,
    dtype: str | Dtype = Dtype.bf16,
    activations: str | ActivationModel = ActivationModel.exact,
    memory: MemoryTechniques | None = None,
    time_options: TimeOptions | None = None,
) -> PlanRequest:
    """A checked ``PlanRequest``; every problem is one ``InputError`` naming the field."""
    gpus = _at_most(_positive_int(gpus, "gpus"), "gpus", MAX_GPUS, "GPUs")
    seq = _positive_int(seq if seq is not None else spec.seq_length, "seq")
    if (global_batch is None) == (global_batch_tokens is None):
        raise InputError("give the global batch in sequences or in tokens (global_batch_tokens)")
    if global_batch_tokens is not None:
        tokens = _positive_int(global_batch_tokens, "global_batch_tokens")
        if tokens % seq:
            raise InputError(
                f"global_batch_tokens={tokens} is not a multiple of seq={seq}: the global batch "
                "is a whole number of sequences"
            )
        global_batch = tokens // seq
    batch = _positive_int(global_batch, "global_batch")
    _at_most(batch, "global_batch", MAX_GLOBAL_BATCH, "sequences")
    typed_pins = {dim: _pin_values(dim, v) for dim, v in (pins or {}).items()}
    for dim, b in (bounds or {}).items():
        if dim not in SIZE_DIMS:
            raise InputError(f"bound {dim}: unknown size; valid: {', '.join(SIZE_DIMS)}")
        _positive_int(b, f"max {dim}")
    if not (0.0 <= memory_headroom < 1.0) or math.isnan(memory_headroom):
        raise InputError(f"memory_headroom={memory_headroom} must be a fraction in [0, 1)")
    if not (0.0 <= reserve_bytes < hw.memory_bytes.value):
        raise InputError(
            f"reserve_bytes={reserve_bytes:g} must be at least 0 and below the card's "
            f"{hw.memory_bytes.value:g} bytes"
        )
    if not pareto_within >= 1.0:  # NaN too
        raise InputError(
            f"pareto_within={pareto_within} must be at least 1, times the best step time (the "
            "whole front: inf, or --pareto-within 0)"
        )
    obj = _choice(Objective, objective, "objective")
    if obj is Objective.gpus and (target_step_time_s is None or not target_step_time_s > 0):
        raise InputError("objective gpus needs a positive target_step_time_s")
    memory, opts = _dispatcher(memory or MemoryTechniques(), time_options or TimeOptions())
    opts = _searchable(opts)
    node = _positive_int(gpus_per_node or hw.gpus_per_node.value, "gpus_per_node")
    gemm_dtype = _choice(Dtype, dtype, "dtype")
    return PlanRequest(
        spec=spec, hw=hw, gpus=gpus, seq=seq, global_batch=batch, pins=typed_pins,
        bounds=dict(bounds or {}), memory_headroom=float(memory_headroom),
        reserve_bytes=float(reserve_bytes), objective=obj, target_step_time_s=target_step_time_s,
        top_k=_at_most(_positive_int(top_k, "top_k"), "top_k", MAX_TOP_K, "layouts"),
        include_all=include_all, pareto_within=float(pareto_within),
        tp_within_node=tp_within_node, allow_uneven=allow_uneven, gpus_per_node=node,
        recipe=_choice(StateRecipe, recipe, "recipe"), dtype=gemm_dtype,
        activations=_choice(ActivationModel, activations, "activations"),
        memory=resolve_fp8_inputs(memory, gemm_dtype), time_options=opts,
    )  # fmt: skip


def _dispatcher(
    memory: MemoryTechniques, opts: TimeOptions
) -> tuple[MemoryTechniques, TimeOptions]:
    """One MoE dispatcher for every candidate's memory and step time, as `tpcalc layout
    --moe-dispatcher` sets both (cli/time_options.py): flex (DeepEP / HybridEP, Megatron-Core
    --moe-token-dispatcher-type flex) prices the dispatch node-aware (``ep_node_dedup``), and a
    node-aware dispatch is flex's, whose memory is alltoall's (``choices.MoeDispatcher``), so
    ``ep_node_dedup`` over alltoall memory is flex. With allgather it is an ``InputError``."""
    flex = MoeDispatcher.flex.value
    if memory.moe_dispatcher == flex:
        return memory, replace(opts, ep_node_dedup=True)
    if not opts.ep_node_dedup:
        return memory, opts
    if memory.moe_dispatcher != MoeDispatcher.alltoall.value:
        raise InputError(
            f"time_options ep_node_dedup: a node-aware dispatch is the flex dispatcher's, but "
            f"memory moe_dispatcher is {memory.moe_dispatcher!r}; give moe_dispatcher 'flex'"
        )
    return replace(memory, moe_dispatcher=flex), opts


def _searchable(opts: TimeOptions) -> TimeOptions:
    """``opts`` if the planner can search under them, else an ``InputError`` naming the field:
    it splits layers evenly (which is Megatron-Core's accounted split with the loss, or both
    ends, counted: ``space.split_ends``) and searches recompute itself."""
    fixed = [n for n in ("first_stage_layers", "last_stage_layers", "recompute_layers")
             if getattr(opts, n) is not None]  # fmt: skip
    fixed += ["chunk_layers"] if opts.chunk_layers else []
    if fixed:
        raise InputError(
            f"time_options {', '.join(fixed)}: the planner splits layers evenly and searches "
            "recompute itself; leave them unset (price such a layout with `tpcalc layout`)"
        )
    if opts.embedding_in_split and not opts.loss_in_split:
        raise InputError(
            "time_options embedding_in_split: the planner counts the loss alone or the "
            "embedding and the loss together as layers of the split (Megatron-Bridge's "
            "recipes set both); add loss_in_split, or price the layout with `tpcalc layout`"
        )
    return opts


__all__ = ("build_request", "OPTION_DIMS", "MAX_GPUS", "MAX_GLOBAL_BATCH", "MAX_TOP_K")
