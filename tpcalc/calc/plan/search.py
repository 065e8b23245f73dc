"""The search: enumerate the space (``space``), drop what does not divide, screen memory for every
remaining candidate at once (``fit``, one numpy pass per shape), then rank by step time with a
provable branch-and-bound (``bounds``) in two tiers: a lower bound of every candidate that fits,
taken per shape in one numpy pass (``_cells``, ``StepBounds.group``), and the exact
``calc.time.step.step_time`` (through ``time.bulk.StepCache``, bit for bit), run only on a
candidate whose bound is still below every other candidate's exact time. The search lists a
block's candidates (``expand``) only when a floor of its bounds can still win (per (micro-batch,
sp, mode) cell: the least bound over its ZeRO stages, or for a large group a looser floor with
no term per stage, ``StepBounds.floors``). The first ``top_k``
candidates that come out exact are the top k of exhaustive exact evaluation (a bound never
exceeds the exact time); each point of the Pareto front likewise (``_top_built``,
``_pareto_built``).

A group (one shape) whose CP ring alone keeps its link busy longer than ``DEFER_IDEAL_STEPS``
ideal steps, or whose data-parallel collectives alone keep its NIC busy longer than
``DEFER_DP_IDEAL_STEPS`` (ZeRO-3 gathering over the network), or whose slowest pipeline stage's
compute alone, m times over, takes longer than ``DEFER_COMPUTE_IDEAL_STEPS`` in every cell
(``_defer_compute``), is screened (its counts are exact) but bounded only when the top k or a
Pareto budget could draw on it (``_defer``, ``_settled``): the same result, fewer bounds. The
front reaches up to the request's ``pareto_within`` times the best step.

The screen and the bounds go unit (tp, cp) by unit; a large search forks one child that runs
part of the units and pipes back their cells and bounds (``_Search._chunks``, ``WORKERS``; the
slabs' memory is taken again here for the groups a search reads, ``_Search.restore``), and the
units are put together in order, so the result is that of one process, bit for bit.

Reported numbers come from the exact model: every candidate in the result is re-priced by
``calc.layout.memory.rank_memory`` and ``step_time`` with the inputs ``tpcalc layout`` would
give them.

ZeRO: every allowed stage is timed. States shrink with every stage (``dp.zero.state_divisors``)
but ZeRO-2 reduce-scatters every micro-batch's gradients and ZeRO-3 also re-gathers the
parameters for every forward and backward (``step._dp_exposed``), so no stage dominates another.
The bounds price ZeRO-2/3's per-micro-batch collectives when they overlap (``StepBounds.group``)
and otherwise ZeRO-1's, which never exceed ZeRO-2's or ZeRO-3's exposed time: with c one pass's
collective and t the pass it runs under, ZeRO-1 exposes max(0, c - drain·t) with drain >= 1 and
ZeRO-2/3 at least m·max(0, c - t), so they stay lower bounds.
"""

from __future__ import annotations

import heapq
import io
import math
import os
import pickle
import platform
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
from msgspec import Struct, field
from msgspec.structs import replace

from tpcalc.calc.dp.zero import ZeroStage
from tpcalc.calc.layout.groups import LayoutRun, ParallelLayout
from tpcalc.calc.layout.memory import run_memory
from tpcalc.calc.plan import space
from tpcalc.calc.plan.bounds import GroupParts, StepBounds
from tpcalc.calc.plan.fit import MemoryScreen
from tpcalc.calc.plan.inverse import gpu_count_grid, min_gpus
from tpcalc.calc.plan.space import RecomputeMode, Shape, Variant
from tpcalc.calc.plan.types import (
    BestMargin,
    Candidate,
    Objective,
    PlanRequest,
    PlanResult,
    ProgressCallback,
)
from tpcalc.calc.time.bulk import StepCache
from tpcalc.calc.time.step import (
    STEP_PARTS,
    StepTime,
    TimeOptions,
    effective_options,
    model_flop_per_token,
)
from tpcalc.choices import AttentionKernel

BATCH = "batch: dp does not divide the global batch"
NO_MICRO_BATCH = "batch: no allowed micro-batch splits global batch / dp"
MEMORY = "memory"


class _Group(Struct):
    """The blocks of one shape: the memory of every (variant, zero, micro-batch, sp, mode) over
    the micro-batches any of its variants allows, as slabs (``fit.MemoryScreen.group_slabs``):
    which (variant, zero, micro-batch) slabs may hold a cell that fits [V, Z, M] and their
    (sp, mode) cells [slabs, S·R] (every entry left out is above the capacity); and which
    micro-batches each variant allows, [V, M]."""

    shape: Shape
    variants: list[Variant]
    mbs: list[int]
    per_dp: int
    sps: list[bool]
    live: np.ndarray
    values: np.ndarray | None  # None: dropped by a child (``drop``), taken again when read
    allowed: np.ndarray
    blocks: list[int]  # the block index of each variant
    # which entries of ``values`` fit, from the screen (``_Search._shape``) until ``_fits`` or
    # ``_defer`` reads it
    fit: np.ndarray | None = None
    # the micro-batches where something fits (prepare), and the flat indices of the timed
    # candidates that fit in [V, Z', those micro-batches, S, R] with their bounds
    bounds: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    used: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # its (micro-batch, sp, mode) cells where something fits (``_Search._cells``): the variant
    # index, the least memory over the ZeRO stages and the floor of their bounds
    cells: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    # a group left without bounds (``EAGER_BOUNDS``): what its bounds read, taken with its
    # floors (``_cells``), then each listed block's bounds from it (``_block_bounds``)
    parts: GroupParts | None = None
    # each variant's [Z, M, S, R] memory, built from its slabs when first read (``mem_of``)
    memory: dict[int, np.ndarray] = field(default_factory=dict)
    # a group whose bounds wait until a search may need them (``_Search._defer``): the floor
    # every candidate of it is at least (``StepBounds.ring_floor``) and the least memory of
    # any entry that fits; None once bounded
    deferred: float | None = None
    least: float = math.inf
    # a group deferred on its cells' compute (``_Search._defer_compute``): the staircase of
    # its cells' least memory and floors (``_front``) instead of (least, deferred)
    stair: tuple[np.ndarray, np.ndarray] | None = None

    def slabs(self) -> np.ndarray:
        """``values``, which a search restores (``_Search.restore``) before it reads them."""
        if self.values is None:
            raise ValueError("the group's memory was dropped: _Search.restore it first")
        return self.values

    def mem(self) -> np.ndarray:
        """The memory [V, Z, M, S, R] (``mem_of`` of every variant)."""
        return np.array([self.mem_of(v) for v in range(len(self.live))])

    def mem_of(self, v: int) -> np.ndarray:
        """Variant v's memory [Z, M, S, R], inf in the slabs left out (every entry there is
        above the capacity). Built only for the variants a search lists (its slabs are a run:
        in C order, by variant first)."""
        got = self.memory.get(v)
        if got is None:
            values = self.slabs()
            live = self.live[v]  # [Z, M]
            start = int(self.live[:v].sum())
            out = np.full((*live.shape, values.shape[1]), math.inf)
            out[live] = values[start : start + int(live.sum())]
            got = self.memory[v] = out.reshape(*live.shape, len(self.sps), -1)
        return got

    def entries(self, v: int, z: np.ndarray, m: np.ndarray, sr: np.ndarray) -> np.ndarray:
        """The memory of variant ``v``'s entries at ZeRO stages ``z``, micro-batches ``m`` (the
        group's indices) and (sp, mode) cells ``sr`` (flat into [S, R]): ``mem_of(v)`` at
        them, read from the slabs without building it (inf in a slab left out)."""
        live = self.live[v]  # [Z, M]
        slab = int(self.live[:v].sum()) + np.cumsum(live.ravel()) - 1
        at = z * live.shape[1] + m
        got = self.slabs()[slab.reshape(live.shape)[z, m].clip(0), sr]
        return np.where(live.ravel()[at], got, math.inf)

    def drop(self) -> None:
        """Leave out the memory of the slabs (``values``) once the cells are taken
        (``_Search._cells``): a child sends its groups without it, and this process takes it
        again (``_Search.restore``) only for the groups a search lists or bounds later. For
        DeepSeek-V3 on 2,048 H800 that is 546 of the 650 MB the child sent, which the pipe
        took about 2-3 s to carry on a 2-vCPU machine; this process restores a few hundred
        groups at about 1 ms each."""
        self.values = None
        self.fit = None


class _Rules(NamedTuple):
    """What the rules that do not read ep and etp leave of a (tp, cp, pp) (``_sequence_rules``):
    the SP values the sequence allows, the variants with the micro-batches their schedule
    allows, and what each rule turned down; then what ``_shape`` reads of them for every ep and
    etp: the micro-batches any kept variant allows (ascending), which each allows [V, M], each
    one's indices into them, and the kept variants."""

    ok: list[bool]
    kept: list[tuple[Variant, list[int]]]
    rejected: Counter[str]
    used: list[int]
    allowed: np.ndarray
    takes: list[list[int]]
    variants: list[Variant]


class _Fits(NamedTuple):
    """The slabs of a group (``_Group``) at the timed ZeRO stages that hold a cell that fits:
    each one's variant, timed stage and micro-batch (its index in ``used``), which of its
    (sp, mode) cells fit [slabs, S·R] and their memory; ``used``: the group's micro-batches
    where something fits, ascending."""

    v: np.ndarray
    t: np.ndarray
    mu: np.ndarray
    fit: np.ndarray
    values: np.ndarray
    used: np.ndarray


class _Block(Struct):
    """One (shape, variant): memory of every (zero, micro-batch, sp, mode), and what fits."""

    shape: Shape
    variant: Variant
    mbs: list[int]
    per_dp: int
    sps: list[bool]
    group: _Group
    v: int  # the variant's index in its group
    take: list[int]  # its micro-batches' indices in the group's

    @property
    def memory(self) -> np.ndarray:
        """[Z, M, S, R]"""
        return self.group.mem_of(self.v)[:, self.take]


class _Listed:
    """Growing arrays of listed picks (rows, memory, bound, key), doubled when full so that
    listing n picks costs O(n) in all."""

    def __init__(self) -> None:
        self.n = 0
        self.arrays: tuple[np.ndarray, ...] = (
            np.zeros((0, 5), np.int32), np.zeros(0), np.zeros(0), np.zeros(0, np.int64),
        )  # fmt: skip

    def add(self, *parts: np.ndarray) -> None:
        k = len(parts[0])
        if self.n + k > len(self.arrays[0]):
            cap = max(2 * len(self.arrays[0]), self.n + k, 1024)
            grown = []
            for a in self.arrays:
                b = np.empty((cap, *a.shape[1:]), a.dtype)
                b[: self.n] = a[: self.n]
                grown.append(b)
            self.arrays = tuple(grown)
        for a, x in zip(self.arrays, parts, strict=True):
            a[self.n : self.n + k] = x
        self.n += k

    def view(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        rows, mems, lbs, keys = self.arrays
        return rows[: self.n], mems[: self.n], lbs[: self.n], keys[: self.n]


class _Pick(Struct, frozen=True):
    """A timed candidate: its block and indices."""

    block: int
    z: int
    m: int
    s: int
    r: int


class _Chunk(NamedTuple):
    """What one unit (tp, cp) of the enumeration adds: its blocks (numbered from 0), its
    groups (their cells taken), what it rejected, and its counts."""

    blocks: list[_Block]
    groups: list[_Group]
    rejections: Counter[str]
    enumerated: int
    fitting: int
    memory_floor: float  # the least slab floor of its groups' screens (inf: none screened)


def _quiet(phase: str, done: float) -> None:
    """The default progress callback: nothing."""


class _Search:
    def __init__(self, req: PlanRequest, gpus: int, progress: ProgressCallback = _quiet) -> None:
        self.req, self.gpus, self.progress = req, gpus, progress
        self.node = req.gpus_per_node or req.hw.gpus_per_node.value
        self.d = space.domains(req, gpus)
        self.opts = replace(
            req.time_options, overlap=space.overlap(req), first_stage_layers=None,
            last_stage_layers=None, recompute_layers=None,
        )  # fmt: skip
        self.capacity = req.capacity_bytes
        self._flash = req.memory.attention == AttentionKernel.flash.value  # else no CP (cp_rule)
        self.screen = MemoryScreen(
            req.spec, seq=req.seq, recipe=req.recipe, activations=req.activations,
            techniques=req.memory, gpus_per_node=self.node,
        )  # fmt: skip
        self.bounds = StepBounds(
            req.spec, req.hw, self.node, self.opts, req.dtype, req.seq, req.memory
        )
        self.blocks: list[_Block] = []
        self.groups: list[_Group] = []
        self._rules: tuple[tuple[int, int, int] | None, _Rules | None] = (None, None)
        self.rejections: Counter[str] = Counter()
        self.enumerated = 0
        self.fitting = 0  # candidates that divide and fit, counted as the blocks are screened
        self.memory_floor = math.inf  # the least slab floor screened (``_Chunk.memory_floor``)
        self.timed = 0
        self.steps = StepCache(req.spec, req.hw, self.opts)  # step_time, bit for bit
        # groups whose CP ring alone keeps a link busy longer than this are bounded only when
        # a search may need them (``_defer``); a search that lists every candidate (--all, the
        # memory objective) bounds them all
        every = req.include_all or req.objective is Objective.memory
        self.defer_above = math.inf if every else DEFER_IDEAL_STEPS * self._ideal_step_s()
        self.defer_dp_above = math.inf if every else DEFER_DP_IDEAL_STEPS * self._ideal_step_s()
        self.defer_compute_above = (
            math.inf if every else DEFER_COMPUTE_IDEAL_STEPS * self._ideal_step_s()
        )
        self._exact: dict[_Pick, tuple[StepTime, ParallelLayout, LayoutRun]] = {}
        # every allowed stage is timed (module docstring)
        self.zeros = self.d.zero
        self.timed_zeros = sorted(self.zeros)
        self.zi = np.array([self.zeros.index(z) for z in self.timed_zeros], dtype=np.int64)
        # the timed stages' slice of a memory array: all of it when every stage is timed in
        # the domain's order (a view, no copy)
        every = np.array_equal(self.zi, np.arange(len(self.zeros)))
        self._zs: slice | np.ndarray = slice(None) if every else self.zi
        # each stage's index among the timed stages (-1: not timed)
        self._timed_at = np.full(len(self.zeros), -1, dtype=np.int64)
        self._timed_at[self.zi] = np.arange(len(self.zi))

    # ---- enumerate, check, fit ----

    def enumerate(self) -> None:
        """Every unit (tp, cp): its shapes checked and screened (``_shape``), then the cells of
        its groups (``_cells``); a large search runs part of the units in a second process
        (``_chunks``). The units are put together in their order, so the blocks, groups and
        counts are those of one pass in order, whoever ran each unit."""
        units = [(tp, cp) for tp in self.d.tp for cp in self.d.cp]
        chunks = self._chunks(units)
        self.blocks, self.groups, self.rejections = [], [], Counter()
        self.enumerated = self.fitting = 0
        self.memory_floor = min((c.memory_floor for c in chunks), default=math.inf)
        for c in chunks:
            offset = len(self.blocks)
            for grp in c.groups:
                grp.blocks = [k + offset if k >= 0 else -1 for k in grp.blocks]
            self.blocks += c.blocks
            self.groups += c.groups
            self.rejections.update(c.rejections)
            self.enumerated += c.enumerated
            self.fitting += c.fitting

    def _chunks(self, units: list[tuple[int, int]]) -> list[_Chunk]:
        """The chunk of every unit, in order. When ``_split`` deals the units to two workers,
        a forked child runs the second share and sends its chunks back through a pipe (pickled:
        the same arrays, bit for bit); if the child fails, this process runs its share too."""
        split = self._split(units)
        if split is None:
            out = []
            for i, unit in enumerate(units):
                self.progress("screen", i / len(units))
                out.append(self._chunk(*unit))
            return out
        mine, theirs = split
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its share, pickled to the pipe, then exit without returning
            code = 1
            try:
                os.close(read)
                self.progress = _quiet
                sent = [self._chunk(*units[i]) for i in theirs]
                if sum(g.slabs().nbytes for c in sent for g in c.groups) > DROP_ABOVE_BYTES:
                    for c in sent:
                        for grp in c.groups:
                            grp.drop()  # its cells taken: this process restores what it reads
                with os.fdopen(write, "wb") as pipe:
                    _send(pipe, sent)
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        done: dict[int, _Chunk] = {}
        source = os.fdopen(read, "rb")
        try:
            for n, i in enumerate(mine):
                self.progress("screen", n / len(units))
                done[i] = self._chunk(*units[i])
            got = _receive(source)
        finally:  # on an error here too: the child, its pipe closed, stops when it writes
            source.close()
            _, status = os.waitpid(pid, 0)
        if status != 0 or got is None or len(got) != len(theirs):
            got = [self._chunk(*units[i]) for i in theirs]
        done.update(zip(theirs, got, strict=True))
        return [done[i] for i in range(len(units))]

    def _split(self, units: list[tuple[int, int]]) -> tuple[list[int], list[int]] | None:
        """The units dealt to two workers (this process, a forked child), or None to run them
        all here: off Linux (macOS's system libraries are not safe to use in a forked child,
        which is why ``multiprocessing`` spawns there; Windows has no fork), with one core, or
        when the search is too small for a second process to pay for its start
        (``FORK_MIN_SHAPES``). Each unit costs about its number of shapes that divide; units
        go, largest first, to the worker with less so far."""
        if WORKERS < 2 or platform.system() != "Linux" or _cores() < 2:
            return None
        cost = [
            sum(self.gpus % (tp * cp * pp) == 0 for pp in self.d.pp) * len(self.d.ep)
            * len(self.d.etp) if space.tp_rule(self.req.spec, tp) is None else 0
            for tp, cp in units
        ]  # fmt: skip
        if sum(cost) < FORK_MIN_SHAPES:
            return None
        # the units of one tp share the screen's and the bounds' caches (per tp): dealt
        # together, unless one tp has nearly all the work
        by_tp: dict[int, list[int]] = {}
        for i, (tp, _) in enumerate(units):
            by_tp.setdefault(tp, []).append(i)
        lots = list(by_tp.values())
        if max(sum(cost[i] for i in lot) for lot in lots) > sum(cost) * (1 - MIN_SHARE):
            lots = [[i] for i in range(len(units))]
        shares: tuple[list[int], list[int]] = ([], [])
        load = [0, 0]
        for lot in sorted(lots, key=lambda lot: -sum(cost[i] for i in lot)):
            w = 0 if load[0] <= load[1] else 1
            shares[w].extend(lot)
            load[w] += sum(cost[i] for i in lot)
        return sorted(shares[0]), sorted(shares[1])

    def _chunk(self, tp: int, cp: int) -> _Chunk:
        """Unit (tp, cp): every pp, ep and etp, with the cells of the groups it adds."""
        self.blocks, self.groups, self.rejections = [], [], Counter()
        self.enumerated = self.fitting = 0
        self.memory_floor = math.inf
        req, d, spec = self.req, self.d, self.req.spec
        modes = d.recompute
        inner = len(self.zeros) * len(modes)
        tp_reason = space.tp_rule(spec, tp)
        sps_tp = d.sp if tp > 1 else ([False] if False in d.sp else d.sp[:1])  # no SP at tp 1
        for pp in d.pp:
            if self.gpus % (tp * cp * pp):
                continue
            dp = self.gpus // (tp * cp * pp)
            if dp not in req.pins.get("dp", (dp,)) or dp > req.bounds.get("dp", dp):
                continue  # dp follows from the others; a pin or bound on it filters
            per_dp = req.global_batch // dp if req.global_batch % dp == 0 else 0
            mbs = space.micro_batches(d, per_dp) if per_dp else []
            vs = space.variants(d, req, pp)
            for ep in d.ep:
                for etp in d.etp:
                    shape = Shape(tp, cp, pp, dp, ep, etp)
                    self._shape(shape, tp_reason, sps_tp, vs, per_dp, mbs, modes, inner)
        self._bound([grp for grp in self.groups if not self._defer(grp)], defer=True)
        return _Chunk(
            self.blocks, self.groups, self.rejections, self.enumerated, self.fitting,
            self.memory_floor,
        )  # fmt: skip

    def _bound(self, groups: list[_Group], defer: bool = False) -> None:
        """The cells of ``groups`` (``_cells``), the shards their bounds read primed first,
        each (tp, cp, sp, micro-batch) for every (ep, etp) at once (``StepBounds.prime``: the
        same sums as shard by shard). With ``defer``, a group whose stage splits alone keep
        it slow is left for later (``_defer_compute``)."""
        fits = [self._fits(grp) for grp in groups]
        want: dict[tuple[int, int, bool, int], list[tuple[int, int]]] = {}
        for grp, got in zip(groups, fits, strict=True):
            if got is not None:
                s = grp.shape
                for i in got.used:
                    for sp in grp.sps:
                        key = (s.tp, s.cp, sp and s.tp > 1, grp.mbs[i])
                        want.setdefault(key, []).append((s.ep, s.etp))
        for (tp, cp, sp, b), pairs in want.items():
            self.bounds.prime(tp, cp, sp, b, pairs, self.d.recompute)
        for grp, got in zip(groups, fits, strict=True):
            if got is None:
                continue
            mbs = [grp.mbs[i] for i in got.used]
            splits = self.bounds.splits(grp.shape, grp.variants, mbs, grp.sps, self.d.recompute)
            if defer and self._defer_compute(grp, got, splits):
                continue
            self._cells(grp, got, splits)

    def _defer_compute(
        self, grp: _Group, got: _Fits, splits: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> bool:  # fmt: skip
        """Leave ``grp`` without bounds for now (as ``_defer``) when its slowest stage's
        compute alone, m times over, keeps every candidate of it above ``defer_compute_above``
        (``StepBounds.compute_floors``, at most every bound of its cell). It keeps the
        staircase of its cells' least memory and floors (``_front``): a search needs the
        group only where a cell under a memory budget has a floor within that budget's time
        (``bound_deferred``)."""
        m = np.array([grp.per_dp // grp.mbs[i] for i in got.used], dtype=np.float64)
        cells = StepBounds.compute_floors(splits, m)  # [V, M', S·R]
        floor = float(cells.min(initial=math.inf))
        if floor <= self.defer_compute_above:
            return False
        mem, fl = _front(self._least_cells(grp, got).ravel(), cells.ravel())
        grp.deferred = floor * (1 - 2 * BOUND_MARGIN)
        grp.stair = (mem, fl * (1 - 2 * BOUND_MARGIN))
        return True

    def _ideal_step_s(self) -> float:
        """The scale ``DEFER_IDEAL_STEPS`` is given in: the model FLOP of the global batch
        spread over every GPU at the card's peak (``time.flops.model_flop_per_token``), plus
        the least fitted MoE overhead any layout pays (``roofline.moe_layer_overhead`` is at
        least c · T / T_fit per MoE layer and pass, so each GPU pays at least
        2 · c · MoE layers · its share of the batch's tokens / T_fit). Without the overhead a
        MoE model whose constant dwarfs its FLOP (Qwen3-30B-A3B on 16 H100: 2.6 s of FLOP,
        8.9 s of overhead at the least) had every group deferred, then bounded anyway."""
        req, r = self.req, self.bounds.r
        tokens = req.global_batch * req.seq
        flop = model_flop_per_token(req.spec, req.seq, self.opts.causal_model_flops) * tokens
        ideal = flop / self.gpus / r.peak_flop_per_s(req.dtype)
        if r.moe_fit_tokens_high:
            moe_layers = sum(map(req.spec.is_moe_layer, range(req.spec.num_hidden_layers)))
            per_gpu = tokens / self.gpus / r.moe_fit_tokens_high
            ideal += 2 * r.moe_layer_overhead_s * moe_layers * per_gpu
        return ideal

    def _defer(self, grp: _Group) -> bool:
        """Leave ``grp`` without bounds for now when every candidate of it is slower by the
        traffic of one link alone than ``defer_above`` (its CP ring, ``StepBounds.ring_floor``)
        or ``defer_dp_above`` (its data-parallel collectives on the NIC at the least of the
        (ZeRO stage, micro-batch) entries that fit, ``StepBounds.dp_link_floor``). It keeps
        the larger floor and the least memory of an entry that fits, and ``bound_deferred``
        bounds it if a search's result could hold one of its candidates. Whether a group is
        deferred changes what is computed, never the result."""
        ring, dp = self.bounds.ring_floor(grp.shape, grp.per_dp), self._dp_link_floor(grp)
        if ring <= self.defer_above and dp <= self.defer_dp_above:
            return False
        floor = max(ring, dp)
        grp.fit = None
        least = float(grp.slabs().min())  # the least entry, which fits if any entry does
        grp.least = least if least <= self.capacity else math.inf
        grp.deferred = floor * (1 - 2 * BOUND_MARGIN)
        return True

    def _dp_link_floor(self, grp: _Group) -> float:
        """The least ``StepBounds.dp_link_floor`` over the entries of ``grp`` a candidate can
        come from: its slabs at a timed ZeRO stage holding a cell that fits (``_fits``);
        0 when its data-parallel groups cross no node, or nothing fits (nothing to defer on)."""
        _, t, mi, _, _, some = self._fitting_slabs(grp)
        if not some.any():
            return 0.0
        net = self.bounds.dp_link_floor(
            grp.shape, grp.variants, grp.mbs, grp.per_dp, [int(z) for z in self.timed_zeros]
        )
        return float(net[t[some], mi[some]].min())

    def bound_deferred(self, tau: float, budgets: list[tuple[float, float]]) -> bool:
        """Bound the deferred groups a search's result could hold a candidate of, and say
        whether there were any (then ``prepare`` and the searches run again). ``tau``: the
        top k's k-th exact time (inf with fewer); ``budgets``: the Pareto front's memory
        budgets with the fastest exact time found under each (inf for the last, under which
        nothing was found). A group is needed when its floor is at most ``tau``, or when it
        has an entry under a budget and its floor is at most that budget's time: only then
        can a candidate of it be among the top k or the fastest under a budget (a floor never
        exceeds an exact time; ties are bounded too)."""
        waiting = [grp for grp in self.groups if grp.deferred is not None]
        need = [
            grp for grp, yes in zip(waiting, _needed(waiting, tau, budgets), strict=True) if yes
        ]
        self._bound_now(need)
        return bool(need)

    def _bound_now(self, groups: list[_Group]) -> None:
        """Bound deferred ``groups`` now (their memory restored if a child dropped it)."""
        for grp in groups:
            grp.deferred, grp.stair = None, None
            self.restore(grp)
        self._bound(groups)

    def restore(self, grp: _Group) -> None:
        """``grp``'s slabs' memory again after ``_Group.drop``: ``_slabs`` over again with the
        inputs ``_shape`` gave it (the same floats; the slabs kept are ``grp.live``)."""
        if grp.values is None:
            _, grp.values, _ = self._slabs(
                grp.shape, grp.variants, grp.mbs, grp.per_dp, grp.sps, grp.allowed
            )

    def _slabs(
        self, shape: Shape, vs: list[Variant], mbs: list[int], per_dp: int, sps: list[bool],
        allowed: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, float]:  # fmt: skip
        """The screen of one group (``MemoryScreen.group_slabs`` at this search's recompute
        modes, ZeRO stages and capacity): its slabs that may fit [V, Z, M], their memory
        [slabs, S·R] and the least floor of its slabs. ``_shape`` and ``restore`` both take
        it here, so a restored group's memory is the screen's, bit for bit."""
        return self.screen.group_slabs(
            shape, vs, mbs, per_dp, sps, self.d.recompute, self.zeros, self.capacity, allowed
        )

    def _shape(
        self, shape: Shape, tp_reason: str | None, sps: list[bool], vs: list[Variant],
        per_dp: int, mbs: list[int], modes: list[RecomputeMode], inner: int,
    ) -> None:  # fmt: skip
        n_mb = max(1, len(mbs))
        total = len(vs) * n_mb * len(sps) * inner
        self.enumerated += total
        reason = tp_reason or space.ep_rule(self.req.spec, shape)
        if reason:
            self.rejections[reason] += total
            return
        key = (shape.tp, shape.cp, shape.pp)
        rules = self._rules[1]
        if rules is None or self._rules[0] != key:  # the same for every ep and etp, in a row
            rules = self._sequence_rules(shape, sps, vs, per_dp, mbs, inner)
            self._rules = (key, rules)
        ok, kept, _, used, allowed, takes, vs_kept = rules
        self.rejections.update(rules.rejected)
        if not ok or not kept:
            return
        live, values, floor = self._slabs(shape, vs_kept, used, per_dp, ok, allowed)
        self.memory_floor = min(self.memory_floor, floor)
        # [V, Z, M] and [slabs, S·R]: every entry that fits, in a slab kept
        # what fits, per variant, from the slabs kept (the others hold nothing that fits)
        fit = values <= self.capacity
        per_slab = fit.sum(axis=1)
        n_fit = np.bincount(np.nonzero(live)[0], per_slab, minlength=len(kept)).astype(np.int64)
        n_all = allowed.sum(axis=1) * (len(self.zeros) * len(ok) * len(modes))
        n_over = n_all - n_fit
        if n_over.any():
            self.rejections[MEMORY] += int(n_over.sum())
        self.fitting += int(n_fit.sum())
        group = _Group(shape, vs_kept, used, per_dp, ok, live, values, allowed, [], fit=fit)
        for i, (v, good) in enumerate(kept):
            if n_over[i] < n_all[i]:
                group.blocks.append(len(self.blocks))
                self.blocks.append(_Block(shape, v, good, per_dp, ok, group, i, takes[i]))
            else:
                group.blocks.append(-1)
        if any(k >= 0 for k in group.blocks):
            self.groups.append(group)

    def _sequence_rules(
        self, shape: Shape, sps: list[bool], vs: list[Variant], per_dp: int, mbs: list[int],
        inner: int,
    ) -> _Rules:  # fmt: skip
        """The rules that do not depend on ep and etp (``_Rules``)."""
        rejected: Counter[str] = Counter()
        n_mb = max(1, len(mbs))
        ok = []
        heads = space.gdn_cp_rule(self.req.spec, shape.tp, shape.cp)
        for sp in sps:
            why = space.cp_rule(self.req.seq, shape.tp, shape.cp, sp, self._flash) or heads
            if why:
                rejected[why] += len(vs) * n_mb * inner
            else:
                ok.append(sp)
        kept: list[tuple[Variant, list[int]]] = []
        if not ok:
            return _Rules(ok, kept, rejected, [], np.zeros((0, 0), bool), [], [])
        for v in vs:
            why = space.pipeline_rule(
                self.req.spec.num_hidden_layers, shape.pp, v, self.req.allow_uneven,
                space.split_ends(self.req),
            )  # fmt: skip
            if why:
                rejected[why] += n_mb * len(ok) * inner
                continue
            if not per_dp:
                rejected[BATCH] += len(ok) * inner
                continue
            if not mbs:
                rejected[NO_MICRO_BATCH] += len(ok) * inner
                continue
            good = []
            for b in mbs:
                why = space.microbatch_rule(shape.pp, per_dp // b, v)
                if why:
                    rejected[why] += len(ok) * inner
                else:
                    good.append(b)
            if good:
                kept.append((v, good))
        used = sorted({b for _, good in kept for b in good})
        allowed = np.array([[b in good for b in used] for _, good in kept])  # [V, M]
        place = {b: i for i, b in enumerate(used)}  # each micro-batch's index in used
        takes = [[place[b] for b in good] for _, good in kept]
        return _Rules(ok, kept, rejected, used, allowed, takes, [v for v, _ in kept])

    @property
    def feasible(self) -> int:
        return self.fitting

    # ---- candidates and bounds ----

    def prepare(self) -> None:
        """Every group's cells (``_cells``, taken as its unit was enumerated) put together: per
        block, the floor of its bounds; the candidates of a block are listed only when a search
        needs them (``expand``)."""
        n = len(self.blocks)
        self.floors = np.full(n, math.inf)
        self.expanded = np.zeros(n, dtype=bool)
        self._list = _Listed()
        self._order = np.zeros(0, np.int64)  # the listed picks by (bound, key)
        self._sorted: tuple[np.ndarray, ...] | None = None
        cell_block, cell_mem, cell_floor = [], [], []
        for g, grp in enumerate(self.groups):
            if g % PROGRESS_EVERY == 0:
                self.progress("bounds", g / max(1, len(self.groups)))
            if grp.cells is None:
                continue
            vi, least, floor = grp.cells
            cell_block.append(np.array(grp.blocks)[vi])
            cell_mem.append(least)
            cell_floor.append(floor)
        if cell_block:
            self.cell_block = np.concatenate(cell_block)
            self.cell_mem = np.concatenate(cell_mem)
            self.cell_floor = np.concatenate(cell_floor)
            _least_per_block(self.floors, self.cell_block, self.cell_floor)
            self.expanded |= ~np.isfinite(self.floors)  # nothing to time
        else:
            self.cell_block, self.cell_mem, self.cell_floor = (np.zeros(0) for _ in range(3))
        self.progress("bounds", 1.0)

    def _fitting_slabs(
        self, grp: _Group
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each slab of ``grp`` [slabs]: its variant, timed-stage index (-1: not timed) and
        micro-batch index, its memory and which of its cells fit [slabs, S·R] (the screen's
        ``grp.fit`` where kept), and whether it holds a candidate: a cell that fits, at a
        timed stage (``_fits``, ``_dp_link_floor``)."""
        vi, zi, mi = np.nonzero(grp.live)
        t = self._timed_at[zi]
        values = grp.slabs()
        fit = values <= self.capacity if grp.fit is None else grp.fit
        return vi, t, mi, values, fit, fit.any(axis=1) & (t >= 0)

    def _fits(self, grp: _Group) -> _Fits | None:
        """The slabs of ``grp`` at the timed ZeRO stages that hold a cell that fits, and the
        micro-batches where something fits (``_Fits``); None if none."""
        vi, t, mi, values, fit, some = self._fitting_slabs(grp)
        grp.fit = None
        if not some.any():
            return None
        # floors only for the micro-batches where something fits (the shards of the others
        # are never priced)
        used = np.unique(mi[some])
        mu = np.searchsorted(used, mi[some])
        return _Fits(vi[some], t[some], mu, fit[some], values[some], used)

    def _cells(
        self, grp: _Group, got: _Fits, splits: tuple[np.ndarray, np.ndarray, np.ndarray]
    ) -> None:
        """Per (variant, micro-batch, sp, mode) cell of ``grp``: the least memory over its
        ZeRO stages that fit, and a floor of their bounds (``grp.cells``), from ``_fits`` and
        the stage splits of its variants at the micro-batches where something fits. A
        group with at most ``EAGER_BOUNDS`` candidates that fit gets every bound now
        (``StepBounds.group``, kept with the group) and its floors are their least per cell;
        a larger one gets ``StepBounds.floors`` and each block's bounds when it is listed
        (``_block_bounds``)."""
        distributed = [zero >= 1 for zero in self.timed_zeros]
        zeros = [int(z) for z in self.timed_zeros]
        used = got.used
        grp.used = used
        mbs = [grp.mbs[i] for i in used]
        n_v, n_t, n_u = len(grp.variants), len(self.zi), len(used)
        n_s, n_r = len(grp.sps), len(self.d.recompute)
        n_sr = n_s * n_r
        least = self._least_cells(grp, got).reshape(n_v, n_u, n_s, n_r)
        if int(got.fit.sum()) <= EAGER_BOUNDS:  # every candidate's bound now, floors from them
            # the flat indices into [V, Z', M', S, R] of the candidates that fit, ascending
            base = ((got.v * n_t + got.t) * n_u + got.mu) * n_sr
            order = np.argsort(base)
            at = (base[order][:, None] + np.arange(n_sr))[got.fit[order]]
            lb = self.bounds.group(
                grp.shape, grp.variants, mbs, grp.per_dp, grp.sps, self.d.recompute,
                distributed, zeros, at, splits,
            )  # fmt: skip
            grp.bounds = (used, at, lb)
            full = np.full((n_v, n_t, n_u, n_s, n_r), math.inf)
            full.ravel()[at] = lb
            floor = full.min(axis=1)  # [V, M, S, R], inf where nothing fits
        else:  # the floors without a term per ZeRO stage; the bounds when listed
            grp.parts = self.bounds.group_parts(
                grp.shape, grp.variants, mbs, grp.per_dp, grp.sps, self.d.recompute,
                distributed, zeros, splits,
            )  # fmt: skip
            fit_z = np.zeros((n_v, n_t, n_u), dtype=bool)  # [V, Z', M']: something fits
            fit_z[got.v, got.t, got.mu] = True
            grp.cells = self._cut_staircase(grp.parts, least, fit_z)
            return
        grp.cells = _staircase(
            least.reshape(n_v, -1), floor.reshape(n_v, -1) * (1 - 2 * BOUND_MARGIN)
        )

    def _least_cells(self, grp: _Group, got: _Fits) -> np.ndarray:
        """Per (variant, micro-batch where something fits, sp·mode) cell of ``grp``, the least
        memory over the timed ZeRO stages that fit [V, M', S·R], inf where none does (a minimum
        is exact in any order): stage by stage, each (variant, micro-batch) at most once per
        stage."""
        mine = np.where(got.fit, got.values, math.inf)
        rows = np.full((len(grp.variants), len(got.used), got.fit.shape[1]), math.inf)
        for t in range(len(self.zi)):
            at_t = got.t == t
            if at_t.any():
                v, m = got.v[at_t], got.mu[at_t]
                rows[v, m] = np.minimum(rows[v, m], mine[at_t])
        return rows

    def _cut_staircase(
        self, parts: GroupParts, least: np.ndarray, fit_z: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``_staircase`` of a large group's cells ([V, M, S, R] least memory, inf where
        nothing fits) with their ``StepBounds.floors``, taking the floor only of the cells
        the staircase may keep. Every cell first gets a cut (``StepBounds.floor_cuts``, at most
        its floor); the cells on the cuts' staircase get their floors; a cell whose cut is at
        least the least floor taken so far among the cells before it (by memory, as
        ``_staircase`` orders them) is left out without one, since a cell before it dominates
        it; the others get their floors. A cell left out is never needed to leave another
        out: the cell that dominates it comes before it and has a floor at most its own. So
        with the left-out cells' floors as inf, ``_staircase`` keeps the same cells with the
        same floors as with every floor taken (``test_cut_staircase_is_the_staircase``)."""
        n_v = least.shape[0]
        scale = 1 - 2 * BOUND_MARGIN
        mem = least.reshape(n_v, -1)
        # every step in memory order (``_staircase``'s, stable; inf, nothing fits, last):
        # the flat index of each cell, its cut and its floor in that order
        order = np.argsort(mem, axis=1, kind="stable")
        flat = order + (np.arange(n_v) * mem.shape[1])[:, None]
        finite = np.isfinite(mem.ravel()[flat])
        cut = np.full(mem.shape, math.inf)
        cut[finite] = self.bounds.floor_cuts(parts, fit_z, flat[finite]) * scale
        before = np.empty_like(cut)  # the least of the cells before each
        before[:, :1] = math.inf
        np.minimum.accumulate(cut[:, :-1], axis=1, out=before[:, 1:])
        floor = np.full(mem.shape, math.inf)
        ask = (cut < before) & finite
        floor[ask] = self.bounds.floors(parts, fit_z, flat[ask]) * scale
        np.minimum.accumulate(floor[:, :-1], axis=1, out=before[:, 1:])
        more = (cut < before) & finite & ~ask
        floor[more] = self.bounds.floors(parts, fit_z, flat[more]) * scale
        # ``_staircase``: a cell stays when its floor is below every floor before it
        np.minimum.accumulate(floor[:, :-1], axis=1, out=before[:, 1:])
        keep = floor < before
        keep[:, :1] = True
        keep &= finite
        # the kept cells as ``_staircase`` gives them: by variant, then cell
        cells, floors = flat[keep], floor[keep]
        by_cell = np.argsort(cells)
        cells = cells[by_cell]
        return cells // mem.shape[1], mem.ravel()[cells], floors[by_cell]

    def expand(self, ks: Iterable[int] | np.ndarray, below: float = math.inf) -> int:
        """Add the candidates of blocks ``ks`` (those not added yet) with their bounds, only
        those with memory below ``below``: the Pareto front lists blocks under its budget, and
        budgets only fall (``_pareto_built``), so a pick left out is one no later budget can
        take; the top k lists whole blocks. The number of blocks added."""
        built = 0
        n_z = len(self.zi)
        todo = [int(k) for k in ks if not self.expanded[int(k)]]
        # the blocks of groups without bounds up front: their bounds in one call per group
        lazy: dict[int, tuple[_Group, list[int]]] = {}
        for k in todo:
            blk = self.blocks[k]
            if blk.group.bounds is None:
                lazy.setdefault(id(blk.group), (blk.group, []))[1].append(blk.v)
        taken: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        for grp, vs in lazy.values():
            for v, got in zip(vs, self._block_bounds(grp, vs, below), strict=True):
                taken[id(grp), v] = got
        for k in todo:
            if self.expanded[k]:  # listed twice in ks
                continue
            self.expanded[k] = True
            blk = self.blocks[k]
            grp = blk.group
            shape = (len(grp.variants), n_z, len(grp.used), len(blk.sps), len(self.d.recompute))
            if grp.bounds is not None:  # taken up front (a small group, ``_cells``)
                used, flat, lb = grp.bounds
                per_v = math.prod(shape[1:])
                lo, hi = np.searchsorted(flat, [blk.v * per_v, (blk.v + 1) * per_v])
                flat, lb = flat[lo:hi], lb[lo:hi]
            else:
                used = grp.used
                flat, lb = taken[id(grp), blk.v]
            _, z, mu, s, r = np.unravel_index(flat, shape)
            inv = np.full(len(grp.mbs), -1, dtype=np.int64)
            inv[blk.take] = np.arange(len(blk.take))
            m = used[mu]  # the group's micro-batch index of each candidate
            i = inv[m]  # the block's
            self.restore(grp)
            mine = grp.entries(blk.v, self.zi[z], m, s * shape[4] + r)
            # its flat index into the block's [Z', M, S, R] (``_Block.memory`` at the timed
            # stages): the order of the exhaustive list
            own = np.ravel_multi_index((z, i, s, r), (n_z, len(blk.take), *shape[3:]))
            if below < math.inf:
                under = mine < below
                z, i, s, r, own, mine, lb = (x[under] for x in (z, i, s, r, own, mine, lb))
            rows = np.stack([np.full_like(z, k), self.zi[z], i, s, r], axis=1).astype(np.int32)
            # the order of the exhaustive list: block, then zero, micro-batch, sp, mode
            keys = (np.int64(k) << KEY_SHIFT) | own.astype(np.int64)
            self._list.add(rows, mine, lb * (1 - BOUND_MARGIN), keys)
            self._sorted = None
            built += 1
        return built

    def _block_bounds(
        self, grp: _Group, vs: list[int], below: float
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each variant of ``vs``: the flat indices into [V, Z', used micro-batches, S, R]
        of its timed candidates that fit with memory below ``below``, in order, and their
        bounds, for a group whose bounds were not taken up front (a large group, ``_cells``),
        from its parts (``StepBounds.group_parts``, kept by ``_cells``) by one
        ``StepBounds.group_at``: elementwise, the same floats as ``StepBounds.group`` over
        the whole group. Its memory is restored first if a child dropped it."""
        self.restore(grp)
        flats = []
        for v in vs:
            mem = grp.mem_of(v)[self._zs][:, grp.used]  # [Z', M', S, R]
            fits = (mem <= self.capacity) & (mem < below)
            fits &= grp.allowed[v][grp.used][None, :, None, None]
            flats.append(np.flatnonzero(fits) + v * fits.size)
        flat = np.concatenate(flats)
        lbs = self.bounds.group_at(grp.parts, flat)  # type: ignore[arg-type]
        ends = np.cumsum([len(f) for f in flats])
        return [(f, lb) for f, lb in zip(flats, np.split(lbs, ends[:-1]), strict=True)]

    def listed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every pick of the expanded blocks, in the order listed: rows (block, zero,
        micro-batch, sp, mode), memory, bound and order key."""
        return self._list.view()

    def built(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``listed`` sorted by (bound, key): the order of a stable sort by bound of the
        exhaustive list, restricted to these picks. Picks listed since the last call are
        sorted alone and merged in (keys are unique, so (bound, key) orders them totally)."""
        if self._sorted is None:
            rows, mems, lbs, keys = self._list.view()
            n_old = len(self._order)
            new = n_old + np.lexsort((keys[n_old:], lbs[n_old:]))
            old = self._order
            at = np.searchsorted(lbs[old], lbs[new], "left")
            right = np.searchsorted(lbs[old], lbs[new], "right")
            for j in np.flatnonzero(right > at):  # equal bounds: by key among them
                at[j] += np.searchsorted(keys[old[at[j] : right[j]]], keys[new[j]])
            self._order = order = np.insert(old, at, new)
            self._sorted = (rows[order], mems[order], lbs[order], keys[order])
        return self._sorted  # type: ignore[return-value]

    def picks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every timed candidate that fits as rows (block, zero, micro-batch, sp, mode) of
        indices, its memory, and its bound, in the exhaustive order (block, zero, micro-batch,
        sp, mode): every block expanded, every deferred group bounded first."""
        deferred = [grp for grp in self.groups if grp.deferred is not None]
        self._bound_now(deferred)
        if deferred or not hasattr(self, "floors"):
            self.prepare()
        self.expand(range(len(self.blocks)))
        rows, mems, lbs, keys = self.built()
        order = np.argsort(keys, kind="stable")
        return rows[order], mems[order], lbs[order]

    def tighten(self, row: np.ndarray) -> float:
        """The exact step time of a pick (the tier after its bound)."""
        return self.exact(_Pick(*(int(x) for x in row))).step_time_s

    def exact(self, p: _Pick) -> StepTime:
        if p not in self._exact:
            layout, run = self.layout_run(p)
            self.timed += 1
            self._exact[p] = (self.steps.step_time(layout, run), layout, run)
        return self._exact[p][0]

    def layout_run(self, p: _Pick) -> tuple[ParallelLayout, LayoutRun]:
        blk = self.blocks[p.block]
        s, b = blk.shape, blk.mbs[p.m]
        mode = self.d.recompute[p.r]
        layout = ParallelLayout(
            gpus_per_node=self.node, tp=s.tp, cp=s.cp, pp=s.pp, dp=s.dp, ep=s.ep, etp=s.etp,
            zero=self.zeros[p.z],
        )  # fmt: skip
        run = LayoutRun(
            seq=self.req.seq, microbatches=blk.per_dp // b, micro_batch=b, vpp=blk.variant.vpp,
            schedule=blk.variant.schedule, recipe=self.req.recipe, sp=blk.sps[p.s],
            recompute=mode.recompute, dtype=self.req.dtype, activations=self.req.activations,
            memory=self.screen.techniques(mode),
            with_latency=True,  # as `tpcalc layout` prices links by default (--latency)
        )  # fmt: skip
        return layout, run

    def candidate(self, p: _Pick) -> Candidate:
        """The pick priced exactly as ``tpcalc layout`` prices it."""
        st = self.exact(p)
        layout, run = self._exact[p][1], self._exact[p][2]
        mem = run_memory(self.req.spec, layout, run)
        worst = max(mem, key=lambda r: r.total_bytes)
        parts = st.parts_s
        top = max(STEP_PARTS, key=lambda n: parts[n])
        # the options as priced: the EP overlap off where Megatron-Core refuses it (step)
        options = effective_options(self.req.spec, layout, run, self.opts)
        return Candidate(
            layout=layout, run=run, options=options, memory_bytes=worst.total_bytes,
            worst_pp_rank=worst.pp_rank, card_memory_bytes=self.req.hw.memory_bytes.value,
            capacity_bytes=self.capacity, step_time_s=st.step_time_s,
            tokens_per_s_per_gpu=st.tokens_per_s_per_gpu, mfu_ratio=st.mfu_ratio,
            dominant_part=top, dominant_time_s=parts[top], step=st,
        )  # fmt: skip


# A group whose candidates that fit are at most this many gets every bound in ``prepare`` and
# floors that are their least per cell; a larger one gets floors with no term per ZeRO stage
# (``StepBounds.floors``, looser, cheaper) and its bounds when one of its blocks is listed.
# Measured (2026-12-01): eager bounds list the fewest blocks (Llama 3 405B on 16,384 H100: its
# largest group has 23,048; with the looser floors everywhere the top 10 listed 840 blocks
# instead of 121), while DeepSeek-V3 on 2,048 H800 has 112 M candidates that fit, mostly in
# groups where pricing every one costs more than the blocks the looser floors add.
EAGER_BOUNDS = 25_000

# A group whose CP ring alone keeps a link busy for more than this many ideal steps (the
# model FLOP of the step at the card's peak, plus the least fitted MoE overhead any layout pays,
# ``_Search._ideal_step_s``) is bounded only when a
# search may need it (``_Search._defer``). It decides what is computed, never the result.
# Measured (2026-12-03, DeepSeek-V3 on 2,048 H800, best step 2.9 ideal steps): 4 defers 3,658
# of 5,988 groups and the searches need none of them again; 3 and 2 defer 4,204, of which 546
# are bounded again, one by one in this process (16.4, 15.5 s wall against 13.5 s).
DEFER_IDEAL_STEPS = 4.0
# The same for a group whose data-parallel collectives alone keep its NIC busy that long
# (``StepBounds.dp_link_floor``): groups that fit only at ZeRO-3 and gather a stage's weights
# over the network for every micro-batch. They hold the least memory of a search, so the low-
# memory end of the front (up to ``pareto_within`` × the best step) draws on any of them its
# time reaches, and every group bounded again runs the searches again. Measured (2026-12-05):
# at 4, Llama 3 405B on 16,384 H100 (best step 1.9 ideal steps) defers 122 of 280 groups and
# bounds 8 of them again, DeepSeek-V3 on 2,048 H800 (2.7) bounds 5 again (top 10 and front
# 2.8 -> 5.0 s CPU); at 8 they defer 94 and 3,693 and bound none again.
DEFER_DP_IDEAL_STEPS = 8.0

# The same for a group whose slowest pipeline stage's compute alone, over its micro-batches,
# takes that long in every (variant, micro-batch, sp, mode) cell (``_Search._defer_compute``,
# ``StepBounds.compute_floors``); its cells' (memory, floor) staircase is kept, so the front
# draws only on groups with a cell under a budget whose floor is within its time. It needs
# the stage splits (``StepBounds.splits``) but not the terms, the costlier part of a bound.
# Measured (2026-12-05, DeepSeek-V3 on 2,048 H800, best step 2.6 ideal steps): at 5 it defers
# 1,303 more of the 5,988 groups (5,013) and bounds none again, 975 groups bounded up front
# instead of 2,278; at 4, 1,535 more, 27 bounded again; at 3, 1,908, 337 bounded again (top 10
# and front 1.5 -> 5.1 s CPU). Llama 3 405B on 16,384 H100: 12 more at 5, none again.
DEFER_COMPUTE_IDEAL_STEPS = 5.0

# A pick's order key: block index above this many bits, its flat index in the block below.
KEY_SHIFT = 32

# Bounds are sums of the same float terms the step adds in another order; this margin keeps
# a rounding difference from ever letting a bound pass the exact time it bounds.
BOUND_MARGIN = 1e-9


def _staircase(mem: np.ndarray, floor: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cells of one group, [V, cells] least memory and floor (inf where nothing fits),
    as (variant, memory, floor) of those that fit, in order, less cells another cell of the
    same variant dominates: with the variant's cells by memory (ties in order), a cell is left
    out when its floor is at least the least floor of the cells before it (each of memory at
    most its own). The searches ask of a block only whether it has a cell with memory below a
    budget and floor at most a time (``_pareto_built``), its least floor (``prepare``,
    ``_top_built``) and, of the cells below a budget, the first of least floor, whose block is
    then listed; a left-out cell's dominating cell answers each the same way for its block,
    so what is listed and found is unchanged."""
    order = np.argsort(mem, axis=1, kind="stable")
    by_mem = np.take_along_axis(floor, order, axis=1)
    below = np.empty(by_mem.shape, dtype=bool)
    below[:, :1] = True
    below[:, 1:] = by_mem[:, 1:] < np.minimum.accumulate(by_mem, axis=1)[:, :-1]
    keep = np.empty_like(below)
    np.put_along_axis(keep, order, below, axis=1)
    keep &= np.isfinite(mem)
    vi, ci = np.nonzero(keep)
    return vi, mem[vi, ci], floor[vi, ci]


def _needed(
    groups: list[_Group], tau: float, budgets: list[tuple[float, float]]
) -> np.ndarray:  # fmt: skip
    """For each deferred group, whether ``bound_deferred`` needs it: its floor is at most
    ``tau``, or for some budget (limit, t) it may hold a candidate with memory below limit
    and a step at most t. A group deferred on its compute: some step of its staircase is
    under the limit with a floor at most t; any other: its least memory is under the limit
    and its floor at most t. Every group and budget at once: the staircases end to end, each
    step that qualifies marking its group."""
    floor = np.array([g.deferred for g in groups], dtype=np.float64)
    need = floor <= tau
    flat = np.array([g.stair is None for g in groups], dtype=bool)
    least = np.array([g.least for g in groups], dtype=np.float64)
    stairs = [(i, g.stair) for i, g in enumerate(groups) if g.stair is not None]
    owner = np.concatenate(
        [np.full(len(st[0]), i, dtype=np.int64) for i, st in stairs] or [np.zeros(0, np.int64)]
    )
    mem = np.concatenate([st[0] for _, st in stairs] or [np.zeros(0)])
    steps = np.concatenate([st[1] for _, st in stairs] or [np.zeros(0)])
    hit = np.zeros(len(mem), dtype=bool)
    for limit, t in budgets:
        need |= flat & (least < limit) & (floor <= t)
        hit |= (mem < limit) & (steps <= t)
    need[owner[hit]] = True
    return need


def _front(mem: np.ndarray, floor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cells of least floor for their memory: by memory ascending (ties in order), each
    cell whose floor is below every floor before it, and cells that fit only (finite memory).
    For any budget, the least floor of the cells below it is that of the last such cell below
    it (``_needed``). ``_staircase`` of one row keeps the same cells; this 1-D form, in
    memory order, is what a deferred group keeps (measured: ``_staircase`` over 1,303 DeepSeek-V3
    groups' cells made the 2,048-H800 search 0.3-1.8 s slower)."""
    order = np.argsort(mem, kind="stable")
    mem, floor = mem[order], floor[order]
    keep = np.isfinite(mem)
    keep[1:] &= floor[1:] < np.minimum.accumulate(floor)[:-1]
    return mem[keep], floor[keep]


def _least_per_block(out: np.ndarray, blocks: np.ndarray, values: np.ndarray) -> None:
    """``np.minimum.at(out, blocks, values)``: the cells come block by block in order (groups
    and their blocks are numbered as enumerated), so the least of each run of one block is
    one ``reduceat`` (a minimum is exact in any order)."""
    if len(blocks) and bool(np.all(blocks[1:] >= blocks[:-1])):
        starts = np.flatnonzero(np.r_[True, blocks[1:] != blocks[:-1]])
        at = blocks[starts]
        out[at] = np.minimum(out[at], np.minimum.reduceat(values, starts))
    else:
        np.minimum.at(out, blocks, values)


def _best_first(
    search: _Search, picks: np.ndarray, lbs: np.ndarray, want: int,
    keys: np.ndarray | None = None, order: np.ndarray | None = None,
) -> list[tuple[float, int]]:  # fmt: skip
    """The ``want`` picks of least exact step time, in order: take picks in order of their
    bound, time each exactly; a timed pick whose time is at most the next bound is final,
    since every pick not yet timed has at least that bound, and so that time (module
    docstring). Equal times go by ``keys`` (default: the index); ``order``: the picks already
    sorted by bound."""
    if order is None:
        order = np.argsort(lbs, kind="stable")
    heap: list[tuple[float, int, int]] = []  # (exact time, key, pick index)
    out: list[tuple[float, int]] = []
    i = 0
    n = len(order)
    while len(out) < want and (i < n or heap):
        if i < n and (not heap or lbs[order[i]] < heap[0][0]):
            j = int(order[i])
            i += 1
            key = j if keys is None else int(keys[j])
            heapq.heappush(heap, (search.tighten(picks[j]), key, j))
        else:
            t, _, j = heapq.heappop(heap)
            out.append((t, j))
    return out


def _top_built(search: _Search, want: int) -> list[tuple[float, _Pick]]:
    """``_best_first`` over every block, building blocks' bounds only where they can matter:
    blocks in order of their floor until ``want`` picks are built, then, as long as some block
    not built has a floor at most the ``want``-th best exact time so far, those blocks too,
    in rounds of at most 1, 2, 4, ... blocks so that the time falls as they come (the first
    block's ``want``-th time can be far above the last: DeepSeek-V3 on 2,048 H800 listed 4,809
    blocks in one round where 5 have a floor at most the final time). A block left out has
    every pick's exact time above that time, so it holds none of the best ``want`` (a floor is
    the least bound of its cell, ``prepare``)."""
    if want <= 0:
        return []
    by_floor = np.argsort(search.floors, kind="stable")
    live = by_floor[np.isfinite(search.floors[by_floor])]
    pos, most = 0, 1
    while True:
        rows, _, lbs, keys = search.built()
        if len(rows) < want and pos < len(live):
            search.expand(live[pos : pos + 1])
            pos += 1
            continue
        ranked = _best_first(search, rows, lbs, want, keys, np.arange(len(rows)))
        tau = ranked[-1][0] if len(ranked) >= want else math.inf
        end = pos
        while end < len(live) and end - pos < most and search.floors[live[end]] <= tau:
            end += 1
        if not search.expand(live[pos:end]):
            return [(t, _Pick(*(int(x) for x in rows[j]))) for t, j in ranked]
        pos, most = end, 2 * most


def _part_name(part: str) -> str:
    return part.removesuffix("_time_s").replace("_", " ")


def _why(best: Candidate, other: Candidate) -> tuple[str, BestMargin]:
    """Why the best beats the runner-up: the part of the step where it saves most and the one
    where it spends most extra (the two breakdowns, part by part), in words and in seconds."""
    a, b = best.step.parts_s, other.step.parts_s
    diffs = sorted(((b[k] - a[k], k) for k in STEP_PARTS), reverse=True)
    gain, part = diffs[0]
    loss, lost = diffs[-1]
    margin = BestMargin(
        step_gain_s=other.step_time_s - best.step_time_s, gained_part=part, gained_s=gain,
        lost_part=lost if loss < 0 else None, lost_s=-loss if loss < 0 else 0.0,
    )  # fmt: skip
    text = f"the best spends less on {_part_name(part)} than the runner-up"
    if margin.lost_part is not None:
        text += f", more on {_part_name(lost)}"
    return text, margin


# The exact front of thousands of layouts is a staircase of steps a user cannot tell apart, so
# the front is taken at memory budgets each this much below the previous point's memory (every
# point is still exactly the fastest layout within its own memory), and a point is shown only
# if it is PARETO_MIN_GAIN faster than the shown point with the next lower memory.
PARETO_MEMORY_STEP = 0.05
PARETO_MIN_GAIN = 0.01


# Processes a large search runs its units (tp, cp) on: issue 11 §2 times the planner on 2 cores.
# 2 forks one child for part of the units (``_Search._chunks``); 1 runs them all in this one.
WORKERS = 2

# A search forks its second worker only with at least this many shapes (tp, cp, pp, ep, etp
# that divide the GPUs). Measured (2026-12-01, 2 vCPUs shared with other sessions): Llama 3 405B
# on 16,384 H100 (394 shapes) screens and bounds in about 0.92 s CPU in one process, or 0.50 s
# here and 0.63 s in the child (each builds its own caches), sending and receiving the child's
# chunks costing about 0.03 s; Llama 3 8B on 64 H100 (74 shapes) searches in about 0.24 s in
# all, too little for the second process to pay for itself.
FORK_MIN_SHAPES = 150


def _send(pipe: io.BufferedWriter, chunks: list[_Chunk]) -> None:
    """Write ``chunks`` for ``_receive``: pickled with their arrays' buffers out of band (no
    copy into the pickle), as the part count, the part sizes, the pickle, then each buffer."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(chunks, protocol=5, buffer_callback=buffers.append)
    parts = [memoryview(head)] + [b.raw() for b in buffers]
    sizes = np.array([len(parts)] + [v.nbytes for v in parts], dtype=np.int64)
    pipe.write(sizes.tobytes())
    for v in parts:
        pipe.write(v)


def _receive(pipe: io.BufferedReader) -> list[_Chunk] | None:
    """The chunks ``_send`` wrote (bit for bit: the same bytes), or None if the stream is
    short."""
    size = np.dtype(np.int64).itemsize  # the part count and sizes are int64
    first = pipe.read(size)
    if len(first) != size:
        return None
    n = int(np.frombuffer(first, dtype=np.int64)[0])
    raw = pipe.read(size * n)
    if len(raw) != size * n:
        return None
    parts = [bytearray(int(k)) for k in np.frombuffer(raw, dtype=np.int64)]
    for part in parts:
        if pipe.readinto(part) != len(part):
            return None
    chunks: list[_Chunk] = pickle.loads(parts[0], buffers=parts[1:])  # written by our own child
    return chunks


# A child whose groups' slab memory adds up to more than this drops it (``_Group.drop``) and
# this process restores the groups it reads; below, sending costs less than restoring. Measured
# on 2 vCPUs: the pipe carried about 150-200 MB/s, a restore costs about 1 ms per group read;
# DeepSeek-V3's child holds 95 MB at 256 H800 and 1,046 MB at 2,048, Llama 3's 2.5-4.3 MB
# (405B on 1,024 and 16,384 H100, 70B on 1,024), where dropping cost 35 restores (0.05 s).
DROP_ABOVE_BYTES = 32e6

# When one tp has more than 1 - MIN_SHARE of the shapes, the units are dealt one by one.
MIN_SHARE = 0.25


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


# Blocks between two progress calls while bounding.
PROGRESS_EVERY = 256


def _fastest(
    search: _Search, picks: np.ndarray, idx: np.ndarray, lbs: np.ndarray, mems: np.ndarray
) -> int:
    """The pick of least exact time among ``idx`` (sorted by bound; ties: least memory):
    picks are timed in bound order until the next bound is no less than the best time."""
    best_t, best_j = math.inf, -1
    for j in idx:
        j = int(j)
        if lbs[j] > best_t:
            break
        t = search.tighten(picks[j])
        if t < best_t or (t == best_t and mems[j] < mems[best_j]):
            best_t, best_j = t, j
    return best_j


def _bound_order(
    search: _Search, rows: np.ndarray, idx: np.ndarray, lbs: np.ndarray, keys: np.ndarray
) -> np.ndarray:
    """The picks ``idx`` that ``_fastest`` visits, in its order: by (bound, key), only those
    with a bound at most the exact time t0 of the first (``_fastest`` stops at the first
    bound above its best time, which is at most t0), so only they are sorted."""
    low = idx[lbs[idx] == lbs[idx].min()]
    first = low[np.argmin(keys[low])]
    t0 = search.tighten(rows[first])
    near = idx[lbs[idx] <= t0]
    return near[np.lexsort((keys[near], lbs[near]))]


def _pareto(search: _Search, picks: np.ndarray, mems: np.ndarray, lbs: np.ndarray) -> list[int]:
    """Picks on the memory-versus-time front, memory ascending: the fastest of all, then the
    fastest with PARETO_MEMORY_STEP less memory than that, and so on (each found by
    branch-and-bound over the picks under the budget), keeping the fastest and then each
    point that the kept faster one beats by PARETO_MIN_GAIN; it ends at the first budget whose
    fastest is slower than the request's ``pareto_within`` times the fastest of all.

    Tried and measured slower (2026-12-01, Llama 3 405B on 16,384 H100): one sweep in memory
    order timing every pick whose bound beats the running best exact time gives the same front
    but times 4,183 picks instead of 2,826 (7.4 s against 5.6 s), because it resolves the
    whole exact staircase while the front needs only the fastest point under each budget."""
    within = search.req.pareto_within
    order = np.argsort(lbs, kind="stable")
    by_mem = mems[order]
    exact: list[int] = []
    limit = math.inf
    top = float(by_mem.max()) if len(by_mem) else 0.0
    while True:
        search.progress("pareto", 1.0 - min(limit, top) / top if top else 1.0)
        idx = order[by_mem < limit]
        if not len(idx):
            break
        j = _fastest(search, picks, idx, lbs, mems)
        if exact and search.tighten(picks[j]) > search.tighten(picks[exact[0]]) * within:
            break
        exact.append(j)
        limit = mems[j] * (1 - PARETO_MEMORY_STEP)
    front: list[int] = []
    for j in exact:  # time ascending from the fastest, memory descending
        if not front or search.tighten(picks[front[-1]]) < search.tighten(picks[j]) * (
            1 - PARETO_MIN_GAIN
        ):
            front.append(j)
    return front[::-1]


def _pareto_built(search: _Search) -> list[_Pick]:
    """``_pareto_budgets``' front."""
    return _pareto_budgets(search)[0]


def _pareto_budgets(search: _Search) -> tuple[list[_Pick], list[tuple[float, float]]]:
    """``_pareto`` over every block, building blocks' bounds only where they can matter: for
    each memory budget, the blocks with a (micro-batch, sp, mode) cell under it whose floor is
    at most the fastest exact time found under it so far (no other cell can hold a faster
    pick).

    Each budget keeps only the cells under it whose block is not listed yet, in order: budgets
    only fall, a listed block's cells are never taken again, and a listed block holds every
    pick of its cells under the budget (``expand``), so while no listed pick is under the
    budget no listed block has a cell under it and the seed is the same cell.

    The front ends at the first budget whose fastest is slower than ``pareto_within`` times the
    fastest of all (as ``_pareto``). Also returned: every budget with the exact time found
    under it, the last with the most a pick under it could take and still be found: ``within``
    times the fastest where the front ended there, inf where no cell was left under it; what
    ``_Search.bound_deferred`` checks the deferred groups against."""
    cb, cm, cf = search.cell_block, search.cell_mem, search.cell_floor
    within = search.req.pareto_within
    cap = math.inf  # the slowest a point may be: within · the fastest, once found
    exact: list[tuple[_Pick, float, float]] = []  # (pick, exact time, memory)
    budgets: list[tuple[float, float]] = []
    limit = math.inf
    top = float(cm.max()) if len(cm) else 0.0
    while True:
        search.progress("pareto", 1.0 - min(limit, top) / top if top else 1.0)
        under = cm < limit
        if not under.any():
            budgets.append((limit, math.inf))
            break
        keep = under & ~search.expanded[cb]
        cb, cm, cf = cb[keep], cm[keep], cf[keep]
        while True:
            rows, mems, lbs, keys = search.listed()
            idx = np.flatnonzero(mems < limit)
            if not len(idx):  # seed: the cell of least floor under the budget
                search.expand(cb[np.argmin(cf)][None], limit)
                continue
            j = _fastest(search, rows, _bound_order(search, rows, idx, lbs, keys), lbs, mems)
            t = search.tighten(rows[j])
            # past the front's end only whether the fastest is within it matters
            todo = cb[cf <= min(t, cap)]
            if not search.expand(np.unique(todo[~search.expanded[todo]]), limit):
                break
        if t > cap:  # every cell left has a floor above the cap
            budgets.append((limit, cap))
            break
        exact.append((_Pick(*(int(x) for x in rows[j])), t, float(mems[j])))
        budgets.append((limit, t))
        cap = exact[0][1] * within
        limit = float(mems[j]) * (1 - PARETO_MEMORY_STEP)
    front: list[tuple[_Pick, float, float]] = []
    for p in exact:  # time ascending from the fastest, memory descending
        if not front or front[-1][1] < p[1] * (1 - PARETO_MIN_GAIN):
            front.append(p)
    return [p for p, _, _ in front[::-1]], budgets


def _settled(search: _Search, want: int) -> tuple[list[tuple[float, _Pick]], list[_Pick]]:
    """The top ``want`` (``_top_built``) and the Pareto front (``_pareto_budgets``) over
    every block, the deferred groups a result could draw on bounded first
    (``_Search.bound_deferred``): when any are, the floors are put together again and both
    searches rerun (the exact times already taken are kept), until none is needed. The
    result is the one with every group bounded from the start."""
    while True:
        ranked = _top_built(search, want)
        front, budgets = _pareto_budgets(search)
        tau = ranked[-1][0] if want and len(ranked) >= want else math.inf
        if not search.bound_deferred(tau, budgets):
            return ranked, front
        search.prepare()


def _plan_gpus(req: PlanRequest, gpus: int, progress: ProgressCallback = _quiet) -> PlanResult:
    search = _Search(req, gpus, progress)
    search.enumerate()
    search.prepare()
    progress("top", 0.0)
    if req.include_all or req.objective is Objective.memory:  # nothing deferred (_Search)
        picks, mems, lbs = search.picks()  # every block: all are listed, or ranked by memory
        listed = _best_first(search, picks, lbs, len(picks)) if req.include_all else []
        ranked = [(t, _Pick(*map(int, picks[j]))) for t, j in listed]
        front_picks = _pareto_built(search)
    else:
        ranked, front_picks = _settled(search, req.top_k)
    if req.objective is Objective.memory:
        order = np.lexsort((lbs, mems))[: req.top_k]
        cands = sorted((search.candidate(_Pick(*map(int, picks[j]))) for j in order),
                       key=lambda c: (c.memory_bytes, c.step_time_s))  # fmt: skip
    else:
        cands = [search.candidate(p) for _, p in ranked]
        cands.sort(key=lambda c: (c.step_time_s, c.memory_bytes))
    front = [search.candidate(p) for p in front_picks]
    top = tuple(cands[: req.top_k])
    why, margin = "", None
    if len(top) > 1 and req.objective is not Objective.memory:
        why, margin = _why(top[0], top[1])
    return PlanResult(
        request=req, gpus=gpus, top=top, pareto=tuple(front),
        all_feasible=tuple(cands) if req.include_all else (), enumerated=search.enumerated,
        feasible=search.feasible, timed_exactly=search.timed,
        rejections=tuple(sorted(search.rejections.items())), why_best=why, why=margin,
        memory_floor_bytes=search.memory_floor,
    )  # fmt: skip


def plan(request: PlanRequest, progress: ProgressCallback | None = None) -> PlanResult:
    """The best layouts for ``request`` (module docstring). Objective gpus: the fewest GPUs, up
    to ``request.gpus``, whose best layout meets ``target_step_time_s``, found by
    ``inverse.min_gpus`` (powers of two up, then bisection over whole nodes); the result is the
    plan on that many GPUs (on ``request.gpus`` when none meets it), with every count tried in
    ``fewest``. ``progress`` is called as the search goes (``types.ProgressCallback``), from the
    calling thread."""
    report = progress or _quiet
    if request.objective is not Objective.gpus:
        return _plan_gpus(request, request.gpus, report)
    timed = replace(request, objective=Objective.time)
    plans: dict[int, PlanResult] = {}

    def at(gpus: int) -> PlanResult:
        if gpus not in plans:
            plans[gpus] = _plan_gpus(timed, gpus, report)
        return plans[gpus]

    def best_step(gpus: int) -> float | None:
        found = at(gpus).best
        return None if found is None else found.step_time_s

    node = request.gpus_per_node or request.hw.gpus_per_node.value
    coarse, fine = gpu_count_grid(node, request.gpus)
    fewest = min_gpus(request.target_step_time_s or 0.0, coarse, fine, best_step)
    result = at(fewest.gpus if fewest.gpus is not None else request.gpus)
    return replace(result, request=request, fewest=fewest)


__all__ = ("plan", "Candidate", "TimeOptions", "ZeroStage")
