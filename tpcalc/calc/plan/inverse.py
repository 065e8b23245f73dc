"""Inverse questions on the planner's machinery (issue 11 §4): the longest sequence and the
largest micro-batch that fit a given layout, and the fewest GPUs that reach a step time.

All three search the same typed core the planner evaluates: ``layout_problems`` (every
divisibility rule of ``tpcalc layout``) and ``rank_memory`` (per-rank memory of every pipeline
rank, the most loaded one compared with the budget). Memory never falls as the sequence or the
micro-batch grows (activations and logits scale with s·b, states do not depend on them), so a
doubling pass followed by bisection finds the largest legal value that fits. The GPU search
takes the planner's best step time per GPU count as a callable, so this module stays pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from msgspec import Struct
from msgspec.structs import replace

from tpcalc.calc.layout.groups import LayoutRun, ParallelLayout, layout_problems
from tpcalc.calc.layout.memory import run_memory
from tpcalc.errors import InputError, divisors
from tpcalc.specs import ModelSpec

# Zig-zag context parallelism splits the sequence into 2·cp chunks (tpcalc.calc.layout.groups:
# "zig-zag CP splits the sequence into 2·cp chunks"; Megatron-LM context_parallel load balancing).
ZIGZAG_CHUNKS_PER_CP_RANK = 2
# The longest sequence the search tries: 2^30 tokens, beyond any published training context
# (the longest, Llama 3's 128K stage, is 2^17), so a doubling search always ends.
MAX_SEQ_TOKENS = 2**30
# The largest micro-batch the search tries without a global batch to bound it (2^20 sequences).
MAX_MICRO_BATCH = 2**20
SRC_SEARCH = (
    "tpcalc.calc.plan.inverse: doubling then bisection on tpcalc.calc.layout.memory.rank_memory "
    "(memory is non-decreasing in s and b), legal values only (tpcalc.calc.layout.groups rules)"
)


def memory_budget_bytes(
    card_bytes: float, headroom_ratio: float = 0.0, reserve_bytes: float = 0.0
) -> float:
    """What a rank may use: the card less a share kept free (``--memory-headroom``, e.g. 0.1 for
    the allocator's fragmentation and the CUDA context) and a fixed reserve (``--reserve-gb``)."""
    return card_bytes * (1.0 - headroom_ratio) - reserve_bytes


def worst_rank_bytes(
    spec: ModelSpec, layout: ParallelLayout, run: LayoutRun, counts: tuple[int, ...] | None = None,
    block: int | None = None,
) -> float:  # fmt: skip
    """Memory of the most loaded pipeline rank (the quantity ``tpcalc layout`` compares with
    the card as ``memory_bytes_per_rank``); ``counts``: a stage split set by hand; ``block``:
    block recompute of that many layers per chunk (``--recompute-layers``)."""
    ranks = run_memory(spec, layout, run, counts=counts, block_layers=block)
    return max(r.total_bytes for r in ranks)


def seq_step(layout: ParallelLayout, sp: bool) -> int:
    """The granularity of legal sequence lengths on ``layout``: cp divides s (2·cp with zig-zag
    CP), and with sequence parallelism t divides s/cp (Korthikanti et al. 2022 §4.2.2)."""
    step = layout.cp * (ZIGZAG_CHUNKS_PER_CP_RANK if layout.cp > 1 else 1)
    if sp and layout.tp > 1:
        step = math.lcm(step, layout.tp * layout.cp)
    return step


class Probe(Struct, frozen=True):
    """One value tried: its worst-rank memory, or why it is not a legal value."""

    value: int
    memory_bytes: float | None
    problem: str | None = None


class MaxFit(Struct, frozen=True):
    """The largest legal value of ``what`` whose most loaded rank fits ``budget_bytes``.

    ``value`` is None when not even the smallest legal value fits; ``next_value`` is the next
    legal value above it (it does not fit), None when the search reached its bound.
    """

    what: str
    value: int | None
    memory_bytes: float | None
    next_value: int | None
    next_memory_bytes: float | None
    budget_bytes: float
    step: int
    probes: tuple[Probe, ...]


def _layout_problem(
    spec: ModelSpec, layout: ParallelLayout, run: LayoutRun, counts: tuple[int, ...] | None
) -> str | None:
    """Every divisibility problem of ``layout`` in one line, None if there is none; with a split
    set by hand (``counts``) the pipeline rules leave the layers per stage to that split."""
    problems = layout_problems(spec, layout, run, by_hand=counts is not None)
    return "; ".join(problems) if problems else None


def _largest(
    what: str,
    step: int,
    limit: int,
    budget: float,
    memory: Callable[[int], float],
) -> MaxFit:
    """Largest multiple k·step <= limit with memory(k·step) <= budget, memory non-decreasing."""
    probes: list[Probe] = []

    def fits(k: int) -> bool:
        used = memory(k * step)
        probes.append(Probe(k * step, used))
        return used <= budget

    top = limit // step
    if top < 1 or not fits(1):
        first = probes[0] if probes else None
        return MaxFit(
            what, None, None, step if top >= 1 else None,
            first.memory_bytes if first else None, budget, step, tuple(probes),
        )  # fmt: skip
    lo, hi = 1, None  # lo fits; hi (when known) does not
    while hi is None:
        k = min(lo * 2, top)
        if k == lo:
            break  # the bound fits
        if fits(k):
            lo = k
        else:
            hi = k
    while hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    seen = {p.value: p.memory_bytes for p in probes}
    nxt = (lo + 1) * step if lo < top else None
    nxt_mem = None
    if nxt is not None:
        nxt_mem = seen.get(nxt)
        if nxt_mem is None:
            nxt_mem = memory(nxt)
            probes.append(Probe(nxt, nxt_mem))
    return MaxFit(what, lo * step, seen[lo * step], nxt, nxt_mem, budget, step, tuple(probes))


def max_seq(
    spec: ModelSpec,
    layout: ParallelLayout,
    run: LayoutRun,
    budget_bytes: float,
    *,
    limit: int = MAX_SEQ_TOKENS,
    counts: tuple[int, ...] | None = None,
) -> MaxFit:
    """The longest sequence whose most loaded rank fits ``budget_bytes`` on ``layout``, among the
    sequence lengths the layout admits (multiples of ``seq_step``). ``run.seq`` is ignored;
    ``counts``: the decoder layers of each virtual stage when the split is set by hand
    (``pipeline.stage_split``), the even split when None.
    Raises InputError when the layout itself is impossible, whatever the sequence."""
    step = seq_step(layout, run.sp)
    if (problem := _layout_problem(spec, layout, replace(run, seq=step), counts)) is not None:
        raise InputError(problem)
    return _largest(
        "seq", step, limit, budget_bytes,
        lambda s: worst_rank_bytes(spec, layout, replace(run, seq=s), counts),
    )  # fmt: skip


def max_micro_batch(
    spec: ModelSpec,
    layout: ParallelLayout,
    run: LayoutRun,
    budget_bytes: float,
    *,
    global_batch: int | None = None,
    counts: tuple[int, ...] | None = None,
) -> MaxFit:
    """The largest micro-batch whose most loaded rank fits ``budget_bytes`` on ``layout``
    (``counts``: a split set by hand, as in ``max_seq``).

    With ``global_batch`` (sequences) the micro-batch must divide global_batch/dp and the
    micro-batches per step follow (global batch = dp·b·m, Narayanan et al. 2021 §2); divisors
    are tried in order, skipping those the pipeline rules reject (DualPipe's m >= 2·pp depends
    on m), up to the first legal one that does not fit. Without it
    ``run.microbatches`` stays and b doubles then bisects. ``run.micro_batch`` is ignored."""
    if global_batch is None:
        trial = replace(run, micro_batch=1)
        if (problem := _layout_problem(spec, layout, trial, counts)) is not None:
            raise InputError(problem)
        return _largest(
            "micro_batch", 1, MAX_MICRO_BATCH, budget_bytes,
            lambda b: worst_rank_bytes(spec, layout, replace(run, micro_batch=b), counts),
        )  # fmt: skip
    if global_batch % layout.dp:
        raise InputError(
            f"global batch {global_batch} is not divisible by dp={layout.dp}: every data-parallel "
            "rank takes the same number of sequences"
        )
    per_rank = global_batch // layout.dp
    probes: list[Probe] = []
    for b in divisors(per_rank):
        trial = replace(run, micro_batch=b, microbatches=per_rank // b)
        problem = _layout_problem(spec, layout, trial, counts)
        used = None if problem else worst_rank_bytes(spec, layout, trial, counts)
        probes.append(Probe(b, used, problem))
        if used is not None and used > budget_bytes:
            break  # memory is non-decreasing in b: no larger micro-batch fits
    legal = [p for p in probes if p.memory_bytes is not None]
    if not legal:
        raise InputError(probes[0].problem or "no legal micro-batch")
    fitting = [p for p in legal if p.memory_bytes is not None and p.memory_bytes <= budget_bytes]
    best = fitting[-1] if fitting else None
    above = [p for p in legal if best is None or p.value > best.value]
    nxt = above[0] if above else None
    return MaxFit(
        "micro_batch", best.value if best else None, best.memory_bytes if best else None,
        nxt.value if nxt else None, nxt.memory_bytes if nxt else None, budget_bytes, 1,
        tuple(probes),
    )  # fmt: skip


class GpuProbe(Struct, frozen=True):
    gpus: int
    step_time_s: float | None  # the planner's best; None: no feasible layout on that many GPUs


class MinGpus(Struct, frozen=True):
    """The fewest GPUs, among those evaluated, whose best layout reaches ``target_step_time_s``."""

    gpus: int | None
    step_time_s: float | None
    target_step_time_s: float
    probes: tuple[GpuProbe, ...]


def gpu_count_grid(gpus_per_node: int, max_gpus: int) -> tuple[list[int], list[int]]:
    """(coarse, fine) GPU counts for ``min_gpus``: powers of two up to ``max_gpus`` and
    ``max_gpus`` itself, and every node multiple (with the powers of two below a node) up to it."""
    coarse, g = [], 1
    while g <= max_gpus:
        coarse.append(g)
        g *= 2
    if coarse[-1] != max_gpus:
        coarse.append(max_gpus)
    fine = sorted({*(c for c in coarse if c < gpus_per_node),
                   *range(gpus_per_node, max_gpus + 1, gpus_per_node)})  # fmt: skip
    return coarse, fine


def min_gpus(
    target_step_time_s: float,
    coarse: Sequence[int],
    fine: Sequence[int],
    best_step_time: Callable[[int], float | None],
) -> MinGpus:
    """Scan ``coarse`` GPU counts upwards (e.g. powers of two) until one reaches the target, then
    bisect the ``fine`` counts (e.g. node multiples) between the last coarse count that missed
    and the first that met it. Step time is not strictly monotone in the GPU count (dp must
    divide the global batch), so the answer is the smallest count evaluated that meets the
    target; every count evaluated is kept in ``probes``."""
    probes: list[GpuProbe] = []

    def meets(g: int) -> bool:
        t = best_step_time(g)
        probes.append(GpuProbe(g, t))
        return t is not None and t <= target_step_time_s

    below, hit = 0, None
    for g in sorted(set(coarse)):
        if meets(g):
            hit = g
            break
        below = g
    if hit is None:
        return MinGpus(None, None, target_step_time_s, tuple(probes))
    between = sorted(g for g in set(fine) if below < g < hit)
    lo, hi = 0, len(between)  # between[hi:] meet (hi == len: only ``hit`` is known to)
    while lo < hi:
        mid = (lo + hi) // 2
        if meets(between[mid]):
            hi = mid
        else:
            lo = mid + 1
    met = [p for p in probes if p.step_time_s is not None and p.step_time_s <= target_step_time_s]
    best = min(met, key=lambda p: p.gpus)
    return MinGpus(best.gpus, best.step_time_s, target_step_time_s, tuple(probes))
