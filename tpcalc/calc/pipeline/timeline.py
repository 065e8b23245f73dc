"""A pipeline schedule, simulated: when each stage runs each micro-batch's F, B and W.

Each stage runs a fixed, published order of operations; an operation starts when its stage is
free and its predecessors have ended (the forward of the previous stage, the backward of the
next stage, its own B before its W). By default communication is free, as in every closed-form
bubble the project prints (``tpcalc.calc.pipeline.schedule``), so the idle time the simulation
leaves on each stage can be compared with them. With ``hop_s`` every pass that waits on another
stage's pass waits that much longer (the send of its activation or gradient, issued when that
pass ends and running beside the sender's next pass): what the schedule's order leaves of the
sends on the critical path (``schedule.exposed_sends``). The orders:

- GPipe: all forwards, then all backwards (Huang et al. 2019 §2.3).
- 1F1B: p-1-r warm-up forwards on stage r, then one forward and one backward in turn, then the
  remaining backwards (Narayanan et al. 2021 §2.2.1, PipeDream-Flush).
- Interleaved: each stage holds v chunks (r, r+p, ...); (p-r-1)·2 + (v-1)·p warm-up forwards,
  virtual micro-batches walked p at a time through the chunks, backwards through the chunks in
  reverse (Narayanan et al. 2021 §2.2.2; Megatron-LM ``schedules.py``
  ``forward_backward_pipelining_with_interleaving``).
- ZB-H1: 1F1B with the backward split into B (input gradient) and W (weight gradient); stage r
  postpones its first r W passes, which then fill the tail (Qi et al. 2023 §3.1 and Figure 3:
  the W starting points move with the warm-up count, in-flight micro-batches stay 1F1B's).
- DualPipe: micro-batches enter from both ends, each rank holding stages r and p-1-r; the eight
  steps of deepseek-ai/DualPipe ``dualpipe.py`` ``DualPipe.step`` (DeepSeek-V3 report §3.2.1),
  with F&B pairs run back to back (no computation-communication overlap, the case the report's
  Figure 5 draws) and the zero-bubble W passes where that code enables them.

Times are per pipeline rank: F, B, W of one micro-batch through all of that rank's layers (a
chunk of the interleaved schedule takes 1/v of them). A full backward (B and W together, as
GPipe, 1F1B and interleaved run it) is one ``BW`` event of length B + W.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum

from msgspec import Struct

from tpcalc.calc.pipeline.schedule import DUALPIPE_DIRECTIONS, check_pipeline
from tpcalc.choices import Schedule
from tpcalc.errors import InputError

SRC_TIMELINE = (
    "simulated: each stage runs its schedule's published order (GPipe: Huang et al. 2019; "
    "1F1B, interleaved: Narayanan et al. 2021 §2.2; ZB-H1: Qi et al. 2023 §3.1; DualPipe: "
    "deepseek-ai/DualPipe dualpipe.py), each pass starting when its predecessors end"
)


class Kind(str, Enum):
    """What an event computes."""

    forward = "F"
    backward_input = "B"  # gradient w.r.t. inputs only (ZB-H1, DualPipe's zero-bubble passes)
    backward_weight = "W"  # gradient w.r.t. weights, deferred
    backward = "BW"  # full backward: B then W in one pass


class Event(Struct, frozen=True):
    """One pass of one micro-batch on one stage (pipeline rank). ``chunk`` is the model chunk
    (interleaved: 0..v-1) or DualPipe's direction (0: enters at rank 0, 1: at rank p-1)."""

    stage: int
    microbatch: int
    chunk: int
    kind: Kind
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


class Timeline(Struct, frozen=True):
    """The simulated step: every event, the step length and each stage's idle share."""

    schedule: Schedule
    p: int
    m: int
    v: int
    events: tuple[Event, ...]
    makespan_s: float
    busy_s: tuple[float, ...]  # per stage

    @property
    def idle_s(self) -> tuple[float, ...]:
        return tuple(self.makespan_s - b for b in self.busy_s)

    @property
    def idle_share_per_stage(self) -> tuple[float, ...]:
        return tuple(i / self.makespan_s for i in self.idle_s)

    @property
    def idle_share(self) -> float:
        """Idle stage-seconds over all stage-seconds of the step: the picture's idle cells."""
        return sum(self.idle_s) / (self.p * self.makespan_s)

    def stage_events(self, stage: int) -> tuple[Event, ...]:
        return tuple(sorted((e for e in self.events if e.stage == stage), key=lambda e: e.start_s))


# An operation before it is timed: (kind, micro-batch, chunk).
Op = tuple[Kind, int, int]
Times = float | Sequence[float]


def _per_stage(value: Times, p: int, name: str) -> tuple[float, ...]:
    values = (value,) * p if isinstance(value, int | float) else tuple(value)
    if len(values) != p:
        raise InputError(f"{name}: give one time or one per stage (pp={p}), got {len(values)}")
    for x in values:
        if not x >= 0:  # also refuses NaN
            raise InputError(f"{name}={x}: a stage time must be a non-negative number of seconds")
    return values


def _one_f_one_b(p: int, m: int, split_w: bool) -> list[list[Op]]:
    """1F1B (and ZB-H1 when ``split_w``): warm-up, steady one-forward-one-backward, cool-down."""
    orders = []
    for r in range(p):
        warm = min(p - 1 - r, m)
        ops: list[Op] = [(Kind.forward, j, 0) for j in range(warm)]
        backs = list(range(m))
        forwards = list(range(warm, m))
        w_done = 0
        for i, j in enumerate(backs):
            if i < len(forwards):
                ops.append((Kind.forward, forwards[i], 0))
            if not split_w:
                ops.append((Kind.backward, j, 0))
                continue
            ops.append((Kind.backward_input, j, 0))
            if j + 1 > r:  # ZB-H1: stage r postpones its first r W passes
                ops.append((Kind.backward_weight, w_done, 0))
                w_done += 1
        ops += [(Kind.backward_weight, j, 0) for j in range(w_done, m)] if split_w else []
        orders.append(ops)
    return orders


def _gpipe(p: int, m: int) -> list[list[Op]]:
    fwd = [(Kind.forward, j, 0) for j in range(m)]
    return [fwd + [(Kind.backward, j, 0) for j in range(m)] for _ in range(p)]


def _interleaved(p: int, m: int, v: int) -> list[list[Op]]:
    """Megatron-LM's interleaved order: virtual micro-batch k is micro-batch
    (k // (p·v))·p + k % p on chunk (k // p) % v (forward) or v-1 minus that (backward)."""

    def mb(k: int) -> int:
        return (k // (p * v)) * p + k % p

    total = m * v
    orders = []
    for r in range(p):
        warm = min((p - r - 1) * 2 + (v - 1) * p, total)
        ops: list[Op] = [(Kind.forward, mb(k), (k // p) % v) for k in range(warm)]
        for i in range(total - warm):
            k = warm + i
            ops.append((Kind.forward, mb(k), (k // p) % v))
            ops.append((Kind.backward, mb(i), v - 1 - (i // p) % v))
        for i in range(total - warm, total):
            ops.append((Kind.backward, mb(i), v - 1 - (i // p) % v))
        orders.append(ops)
    return orders


def _dualpipe(p: int, m: int) -> list[list[Op]]:
    """deepseek-ai/DualPipe ``DualPipe.step``, steps 1-8, as a list of passes per rank."""
    return [_dualpipe_rank(p, m, r) for r in range(p)]


def _dualpipe_rank(p: int, m: int, r: int) -> list[Op]:
    """The passes of rank r. A phase is 0 or 1; the direction it runs is phase XOR (rank in the
    second half). W passes queue up in the order their zero-bubble B passes ran, and ``W`` takes
    the oldest. (The middle ranks' unoverlapped first F&B of step 4 is the same order here.)"""
    half_ranks, half_m = p // DUALPIPE_DIRECTIONS, m // DUALPIPE_DIRECTIONS
    second = int(r >= half_ranks)
    hr = min(r, p - 1 - r)
    next_f, next_b = [0, 0], [0, 0]
    queue: list[tuple[int, int]] = []
    ops: list[Op] = []

    def f(phase: int) -> None:
        d = phase ^ second
        ops.append((Kind.forward, next_f[d] + d * half_m, d))  # reverse direction numbered after
        next_f[d] += 1

    def b(phase: int, zb: bool = False) -> None:
        d = phase ^ second
        j = next_b[d] + d * half_m
        next_b[d] += 1
        if zb:
            ops.append((Kind.backward_input, j, d))
            queue.append((j, d))
        else:
            ops.append((Kind.backward, j, d))

    def w() -> None:
        j, d = queue.pop(0)
        ops.append((Kind.backward_weight, j, d))

    for _ in range((half_ranks - hr - 1) * 2):  # step 1: nF0
        f(0)
    for _ in range(hr + 1):  # step 2: nF0F1
        f(0)
        f(1)
    for _ in range(half_ranks - hr - 1):  # step 3: nB1W1F1 (zero bubble)
        b(1, zb=True)
        w()
        f(1)
    for _ in range(half_m - p + hr + 1):  # step 4: nF0B1F1B0 (F&B pairs back to back)
        f(0)
        b(1)
        f(1)
        b(0)
    for _ in range(half_ranks - hr - 1):  # step 5: nB1F1B0
        b(1)
        f(1)
        b(0)
    steps6 = hr + 1  # step 6: nB1B0, the second half with zero bubble
    zb = False
    for i in range(steps6):
        if i == steps6 // 2 and hr % 2 == 1:
            zb = True
        b(1, zb=zb)
        if i == steps6 // 2 and hr % 2 == 0:
            zb = True
        b(0, zb=zb)
    for _ in range(half_ranks - hr - 1):  # step 7: nWB0 (zero bubble)
        w()
        b(0, zb=True)
    for _ in range(hr + 1):  # step 8: nW
        w()
    return ops


def _position(schedule: Schedule, p: int, v: int, rank: int, chunk: int) -> int:
    """Where (rank, chunk) sits in the micro-batch's path through the model, 0 = first."""
    if schedule is Schedule.interleaved:
        return chunk * p + rank
    if schedule is Schedule.dualpipe and chunk == 1:
        return p - 1 - rank
    return rank


def _dependencies(schedule: Schedule, p: int, v: int) -> Callable[[int, Op], list[tuple]]:
    """The passes an (rank, op) waits for, as keys (rank, kind-group, micro-batch, chunk)."""
    last = p * v - 1 if schedule is Schedule.interleaved else p - 1

    def locate(pos: int, chunk: int) -> tuple[int, int]:
        if schedule is Schedule.interleaved:
            return pos % p, pos // p
        if schedule is Schedule.dualpipe and chunk == 1:
            return p - 1 - pos, 1
        return pos, chunk

    def deps(rank: int, op: Op) -> list[tuple]:
        kind, j, chunk = op
        pos = _position(schedule, p, v, rank, chunk)
        if kind is Kind.forward:
            if pos == 0:
                return []
            r, c = locate(pos - 1, chunk)
            return [(r, "F", j, c)]
        if kind is Kind.backward_weight:
            return [(rank, "B", j, chunk)]
        if pos == last:
            return [(rank, "F", j, chunk)]
        r, c = locate(pos + 1, chunk)
        return [(r, "B", j, c), (rank, "F", j, chunk)]

    return deps


def _hop(key: tuple, rank: int, op: Op, hop_s: float) -> float:
    """The send between a predecessor ``key`` and (rank, op): none within one stage's chunk
    (its own forward, its own B before W), ``hop_s`` from any other stage or chunk."""
    return 0.0 if (key[0], key[3]) == (rank, op[2]) else hop_s


def _group(kind: Kind) -> str:
    """B and BW both produce the input gradient the previous stage waits for."""
    return {Kind.forward: "F", Kind.backward_weight: "W"}.get(kind, "B")


def simulate(
    schedule: Schedule,
    p: int,
    m: int,
    v: int,
    forward_s: Times,
    backward_input_s: Times,
    backward_weight_s: Times,
    hop_s: float = 0.0,
) -> Timeline:
    """Simulate one step of ``schedule`` on p stages with m micro-batches (v chunks per stage for
    interleaved); F, B, W in seconds, one for all stages or one per stage; ``hop_s``: the time
    a send between two stages takes (0: communication is free).

    Raises InputError for a pipeline ``check_pipeline`` refuses (with one layer per chunk, the
    simulator needs no model) or the interleaved schedule with m not a multiple of p (Megatron-LM
    requires it). Sources: the module docstring.
    """
    check_pipeline(p * v, p, m, v, schedule)
    if schedule is Schedule.interleaved and m % p:
        raise InputError(
            f"the interleaved schedule needs microbatches divisible by pp, as Megatron-LM's "
            f"interleaved order does: {m} by {p}"
        )
    if not hop_s >= 0:
        raise InputError(f"hop_s={hop_s}: a send time must be a non-negative number of seconds")
    fwd = _per_stage(forward_s, p, "F")
    bwd = _per_stage(backward_input_s, p, "B")
    wgt = _per_stage(backward_weight_s, p, "W")
    orders = {
        Schedule.gpipe: lambda: _gpipe(p, m),
        Schedule.one_f_one_b: lambda: _one_f_one_b(p, m, split_w=False),
        Schedule.zb_h1: lambda: _one_f_one_b(p, m, split_w=True),
        Schedule.interleaved: lambda: _interleaved(p, m, v),
        Schedule.dualpipe: lambda: _dualpipe(p, m),
    }[schedule]()
    per_chunk = v if schedule is Schedule.interleaved else 1

    def duration(rank: int, kind: Kind) -> float:
        t = {
            Kind.forward: fwd[rank],
            Kind.backward_input: bwd[rank],
            Kind.backward_weight: wgt[rank],
            Kind.backward: bwd[rank] + wgt[rank],
        }[kind]
        return t / per_chunk

    deps = _dependencies(schedule, p, v)
    ends: dict[tuple, float] = {}
    free = [0.0] * p
    nxt = [0] * p
    events: list[Event] = []
    progress = True
    while progress:
        progress = False
        for r in range(p):
            while nxt[r] < len(orders[r]):
                op = orders[r][nxt[r]]
                need = deps(r, op)
                if any(k not in ends for k in need):
                    break
                start = max([free[r], *(ends[k] + _hop(k, r, op, hop_s) for k in need)])
                end = start + duration(r, op[0])
                kind, j, chunk = op
                ends[(r, _group(kind), j, chunk)] = end
                events.append(Event(r, j, chunk, kind, start, end))
                free[r] = end
                nxt[r] += 1
                progress = True
    if any(nxt[r] < len(orders[r]) for r in range(p)):  # an order that waits on itself
        raise InputError(f"{schedule.value} with pp={p}, microbatches={m}: the order deadlocks")
    busy = tuple(
        sum(e.duration_s for e in events if e.stage == r) for r in range(p)
    )  # fmt: skip
    return Timeline(schedule, p, m, v, tuple(events), max(free), busy)
