"""Pipeline parallelism: layers per stage, stage-to-stage bytes, bubbles, in-flight activations.

The model's layers are cut into p stages; each micro-batch's activation is sent from stage to
stage in the forward pass and its gradient back in the backward pass (seed 000 summary table
"流水线并行"). Times F, B, W are one micro-batch on one stage: forward, backward for inputs,
backward for weights (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", §2).
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec import Struct

from tpcalc.choices import Schedule
from tpcalc.errors import DivisibilityError, InputError, divide, divisors
from tpcalc.units import Dtype

SRC_GPIPE = "Huang et al. 2019 (GPipe) §2.3; Narayanan et al. 2021 §2.2.1: bubble (p-1)/m"
SRC_INTERLEAVED = "Narayanan et al. 2021 §2.2.2: interleaved bubble (p-1)/(m·v)"
SRC_ZB = "Qi et al. 2023 (Zero Bubble Pipeline Parallelism) §3.1: ZB-H1 bubble (p-1)(F+B-W)"
SRC_DUALPIPE = "DeepSeek-V3 report §3.2.1 Table 2: DualPipe bubble (PP/2-1)(F&B+B-3W), 2x params"
SRC_P2P = "Narayanan et al. 2021 §4.1: s·b·h per micro-batch, /t with the scatter/gather trick"
SRC_SPLIT = "layers over p·v chunks; extra layers to middle stages (ends hold embedding, LM head)"
SRC_ACCOUNTED_SPLIT = (
    "Megatron-Core transformer_block.py get_num_layers_to_build and transformer_config.py "
    "(account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split): the "
    "embedding and the loss each count as one layer of the split, and their chunk builds one "
    "decoder layer fewer"
)
SRC_HAND_SPLIT = (
    "stage_split: Megatron-LM --decoder-first/last-pipeline-num-layers, Megatron-Core "
    "--pipeline-model-parallel-layout (pipeline_parallel_layer_layout.py), or the accounted "
    "split (" + SRC_ACCOUNTED_SPLIT + ")"
)
# Layers the embedding and the loss each count for in the accounted split (SRC_ACCOUNTED_SPLIT).
ACCOUNTED_SLOT_LAYERS = 1
SRC_INFLIGHT = (
    "GPipe m; 1F1B p-r (Narayanan et al. 2021 §2.2.1); interleaved p+(p-1)/v "
    "(Korthikanti et al. 2022 §4.2.3); ZB-H1 p (Qi et al. 2023); DualPipe p+1 (DeepSeek-V3 Table 2)"
)

# DualPipe feeds micro-batches from both ends, so each rank keeps two model chunks
# (DeepSeek-V3 report §3.2.1, Table 2: "Parameter 2x").
DUALPIPE_PARAM_COPIES = 2
DUALPIPE_EXTRA_IN_FLIGHT = 1  # Table 2: activation PP+1 micro-batches
DUALPIPE_DIRECTIONS = 2  # micro-batches split evenly between the two directions
P2P_SENDS_PER_MICROBATCH = 2  # its activation forward and its gradient backward (seed 000)
SRC_EXPOSED_SENDS = (
    "the schedule's published order with every stage-to-stage send a latency on its "
    "dependency (tpcalc.calc.pipeline.timeline.simulate, hop_s; checked over p, m, v and F, B, W "
    "by tests/test_timeline.py): Megatron-Core schedules.py waits for each pass's input before "
    "running it (send_forward_recv_backward in 1F1B; with overlap_p2p_comm the interleaved "
    "schedule posts the receive a pass ahead); DualPipe hides its sends under its F&B pairs "
    "(DeepSeek-V3 report §3.2.1), so its fill and drain are counted"
)


class StageTimes(Struct, frozen=True):
    """One micro-batch on one stage, seconds: forward F, backward-for-input B, for-weights W.

    ``fb_overlap_s`` is DualPipe's F&B (a forward and a backward chunk run overlapped); None
    means no overlap, F&B = F + B + W, the case the official DualPipe schedule figure draws.
    """

    forward_s: float
    backward_input_s: float
    backward_weight_s: float
    fb_overlap_s: float | None = None

    @property
    def full_s(self) -> float:
        return self.forward_s + self.backward_input_s + self.backward_weight_s

    @property
    def fb_s(self) -> float:
        return self.full_s if self.fb_overlap_s is None else self.fb_overlap_s


# F = B = W: the assumption behind seed 000's "ZB-H1 = 1/3 of 1F1B" (Qi et al. 2023 §3.1); the
# bubble ratios of GPipe, 1F1B and interleaved do not depend on the times at all.
EQUAL_TIMES = StageTimes(1.0, 1.0, 1.0)


def check_pipeline(
    num_layers: int, p: int, m: int, v: int, schedule: Schedule, *, allow_uneven: bool = True,
    by_hand: bool = False,
) -> None:  # fmt: skip
    """Raise a one-line TpcalcError for an impossible pipeline; return None when it is fine.
    ``by_hand``: the layers of each stage are set by hand (``stage_split`` checks them), so the
    even split's rules on the layer count do not apply."""
    for name, value in (("pp", p), ("microbatches", m), ("vpp", v)):
        if value < 1:
            raise InputError(f"{name}={value} must be a positive integer")
    if v > 1 and schedule is not Schedule.interleaved:
        raise InputError(f"vpp={v} applies only to the interleaved schedule; use vpp=1")
    if schedule is Schedule.interleaved and v < 2:
        raise InputError("the interleaved schedule needs vpp >= 2 (vpp=1 is plain 1f1b)")
    if p > num_layers and not by_hand:
        raise InputError(f"pp={p} exceeds num_hidden_layers={num_layers}: a stage needs a layer")
    if p * v > num_layers and not by_hand:
        raise InputError(
            f"vpp={v} needs pp·vpp={p * v} model chunks but there are only "
            f"num_hidden_layers={num_layers} layers; lower vpp or pp"
        )
    if not allow_uneven and not by_hand:
        divide(num_layers, p * v, what="num_hidden_layers", by="pp·vpp" if v > 1 else "pp")
    if schedule is Schedule.dualpipe:
        if p % DUALPIPE_DIRECTIONS:
            raise DivisibilityError(f"DualPipe needs an even pp, got pp={p}")
        if m % DUALPIPE_DIRECTIONS or m < DUALPIPE_DIRECTIONS * p:
            need = DUALPIPE_DIRECTIONS * p
            raise InputError(f"DualPipe needs an even microbatches >= 2·pp={need}, got {m}")


def chunk_layer_counts(num_layers: int, chunks: int) -> tuple[int, ...]:
    """Layers of each of ``chunks`` consecutive model chunks, as even as possible.

    The first and last chunks also hold the embedding and the LM head, so the remainder of an
    uneven split goes to the middle chunks first (Megatron-LM sets the ends by hand with
    --decoder-first/last-pipeline-num-layers).
    """
    base, extra = divmod(num_layers, chunks)
    counts = [base] * chunks
    order = list(range(1, chunks - 1)) + [0, chunks - 1]
    for i in order[:extra]:
        counts[i] += 1
    return tuple(counts)


def rank_layers(
    num_layers: int, p: int, v: int = 1, counts: Sequence[int] | None = None
) -> list[list[int]]:
    """Decoder layer indices held by each of the p ranks (its v chunks, in order); ``counts``:
    the layers of each chunk when set by hand (``pipeline.stage_split``), else even."""
    counts = counts if counts is not None else chunk_layer_counts(num_layers, p * v)
    starts = [sum(counts[:c]) for c in range(len(counts))]
    return [
        [i for c in rank_chunks(p, v, r) for i in range(starts[c], starts[c] + counts[c])]
        for r in range(p)
    ]


def accounted_split(
    num_layers: int, pp: int, vpp: int = 1, *, embedding: bool = False, loss: bool = False
) -> tuple[int, ...]:
    """Decoder layers of each of the pp·vpp virtual stages when the embedding and/or the loss
    count as layers of the split (SRC_ACCOUNTED_SPLIT): n = layers + embedding + loss slots,
    every chunk gets n / (pp·vpp) slots, the first chunk builds one decoder layer fewer for
    the embedding and the last one fewer for the loss. Megatron's rules: n divisible by pp and
    n / pp by vpp. No chunk goes below zero: each holds n / (pp·vpp) >= 1 slots and loses at
    most one, and a single chunk (pp·vpp = 1) loses both ends from layers + ends."""
    slots = num_layers + ACCOUNTED_SLOT_LAYERS * (embedding + loss)
    counted = " and ".join(name for name, on in (("embedding", embedding), ("loss", loss)) if on)
    what = f"pipeline split counting the {counted} as layers: {num_layers} + {slots - num_layers}"
    if slots % pp:
        valid = ", ".join(map(str, divisors(slots)))
        raise DivisibilityError(
            f"{what} = {slots} slots do not divide by pp={pp}; valid pp: {valid}"
        )
    per_rank = slots // pp
    if per_rank % vpp:
        valid = ", ".join(map(str, divisors(per_rank)))
        raise DivisibilityError(
            f"{what} = {slots} slots give {per_rank} per pipeline rank, which does not divide "
            f"by vpp={vpp}; valid vpp: {valid}"
        )
    per_chunk = per_rank // vpp
    counts = [per_chunk] * (pp * vpp)
    counts[0] -= ACCOUNTED_SLOT_LAYERS * embedding
    counts[-1] -= ACCOUNTED_SLOT_LAYERS * loss
    return tuple(counts)


def stage_split(
    num_layers: int,
    pp: int,
    vpp: int = 1,
    *,
    first: int | None = None,
    last: int | None = None,
    chunks: tuple[int, ...] | None = None,
    embedding: bool = False,
    loss: bool = False,
) -> tuple[int, ...]:
    """Decoder layers of each of the pp·vpp virtual stages, in stage order.

    Even split by default (``chunk_layer_counts``); ``first``/``last`` fix the layers of the
    first and last stage and split the rest evenly over the middle (Megatron-LM
    --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers); ``chunks`` gives
    every virtual stage's layers (Megatron-Core --pipeline-model-parallel-layout, whose stage c
    sits on rank c mod pp: megatron/core/transformer/pipeline_parallel_layer_layout.py);
    ``embedding``/``loss`` count the embedding and the loss as layers (``accounted_split``).
    Megatron refuses any two of these three ways together, and so does this.
    """
    if embedding or loss:
        if chunks is not None or first is not None or last is not None:
            raise InputError(
                "--account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-"
                "split cannot be combined with --pipeline-layout or --first/--last-stage-layers "
                "(Megatron-Core refuses them together); pick one way to set the split"
            )
        return accounted_split(num_layers, pp, vpp, embedding=embedding, loss=loss)
    if chunks is not None:
        if first is not None or last is not None:
            raise InputError("a pipeline layout and --first/--last-stage-layers exclude each other")
        if len(chunks) != pp * vpp or sum(chunks) != num_layers or min(chunks) < 0:
            raise InputError(
                f"pipeline layout: {len(chunks)} stages holding {sum(chunks)} layers; "
                f"pp·vpp = {pp * vpp} stages holding the model's {num_layers} layers are needed"
            )
        return tuple(chunks)
    if first is None and last is None:
        return chunk_layer_counts(num_layers, pp * vpp)
    if vpp != 1:
        raise InputError("--first-stage-layers/--last-stage-layers need --vpp 1")
    if pp < 2:
        raise InputError("--first-stage-layers/--last-stage-layers need --pp 2 or more")
    head, tail = first or 0, last or 0
    middle_stages = pp - (first is not None) - (last is not None)
    rest = num_layers - head - tail
    if rest < 0 or (middle_stages == 0 and rest) or (middle_stages and rest < middle_stages):
        raise InputError(
            f"--first-stage-layers {first} and --last-stage-layers {last} leave {rest} of "
            f"{num_layers} layers for {middle_stages} middle stages; each needs at least one"
        )
    middle = list(chunk_layer_counts(rest, middle_stages)) if middle_stages else []
    return tuple(
        ([first] if first is not None else []) + middle + ([last] if last is not None else [])
    )


def rank_chunks(p: int, v: int, rank: int) -> list[int]:
    """Model chunks held by ``rank``: r, r+p, ..., r+(v-1)p (Narayanan et al. 2021 §2.2.2)."""
    return [rank + k * p for k in range(v)]


def rank_layer_counts(
    num_layers: int, p: int, v: int = 1, counts: Sequence[int] | None = None
) -> tuple[int, ...]:
    """Decoder layers held by each of the p ranks (summing its v chunks); ``counts``: the
    layers of each chunk when set by hand (``stage_split``), else even."""
    chunks = counts if counts is not None else chunk_layer_counts(num_layers, p * v)
    return tuple(sum(chunks[c] for c in rank_chunks(p, v, r)) for r in range(p))


def rank_params(
    layer_params: Sequence[int],
    p: int,
    v: int,
    *,
    embedding_params: int,
    lm_head_params: int,
    other_params: int = 0,
    schedule: Schedule = Schedule.one_f_one_b,
    counts: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """Parameters each rank holds: its layers, + embedding on the first chunk, + LM head and
    ``other_params`` (final norm, MTP) on the last. DualPipe ranks hold stages r and p-1-r.
    ``counts``: the layers of each chunk when set by hand (``stage_split``), else even."""
    chunks = counts if counts is not None else chunk_layer_counts(len(layer_params), p * v)
    bounds = [sum(chunks[:c]) for c in range(len(chunks) + 1)]
    chunk_params = [sum(layer_params[bounds[c] : bounds[c + 1]]) for c in range(len(chunks))]
    chunk_params[0] += embedding_params
    chunk_params[-1] += lm_head_params + other_params
    per_rank = [sum(chunk_params[c] for c in rank_chunks(p, v, r)) for r in range(p)]
    if schedule is Schedule.dualpipe:
        return tuple(per_rank[r] + per_rank[p - 1 - r] for r in range(p))
    return tuple(per_rank)


def p2p_bytes(
    seq: int, micro_batch: int, hidden: int, dtype: Dtype, *, tp: int = 1, scatter_gather: bool
) -> float:
    """Bytes of one activation (or its gradient) sent between stages for one micro-batch.

    s·b·h·dtype; with TP and the scatter/gather optimization each of the t ranks sends 1/t and
    the next stage all-gathers over NVLink. Source: Narayanan et al. 2021 §4.1; seed 000
    (4,096 × 5,120 × 2 B = 41.9 MB, printed as 0.0 GB).
    """
    full = seq * micro_batch * hidden * dtype.bytes
    return full / tp if scatter_gather else float(full)


def p2p_sends_per_rank(schedule: Schedule, p: int, m: int, v: int) -> int:
    """Activations plus gradients a middle rank sends per step: 2·m per chunk it holds."""
    if p == 1:
        return 0
    return P2P_SENDS_PER_MICROBATCH * m * (v if schedule is Schedule.interleaved else 1)


def exposed_sends(schedule: Schedule, p: int, m: int, v: int) -> int:
    """Stage-to-stage sends on a step's critical path when every send runs beside compute
    (``SRC_EXPOSED_SENDS``), both directions counted.

    The fill and drain cross p−1 stage boundaries each way. In 1F1B's steady state every pass
    waits on a neighbour's pass that has just ended, so ⌊(m−1)(p−1)/p⌋ more round trips lie on
    the path; ZB-H1's deferred W passes absorb all but p−1 of them (with W ≤ min(F, B), the
    regime of Qi et al. 2023 §3.1; a longer W absorbs more, so the count is then an upper
    bound); the interleaved schedule's fill and drain walk all p·v virtual stages and its
    steady state has slack; GPipe runs each direction as one wave.
    """
    if p == 1:
        return 0
    fill = p - 1
    if schedule is Schedule.interleaved:
        fill = p * v - 1
    steady = (m - 1) * (p - 1) // p
    if schedule is Schedule.one_f_one_b:
        fill += steady
    elif schedule is Schedule.zb_h1:
        fill += min(p - 1, steady)
    return P2P_SENDS_PER_MICROBATCH * fill


def pp_send_count(schedule: Schedule, p: int, m: int, v: int, *, overlap: bool) -> int:
    """Stage-to-stage sends a step waits for, both directions: with ``overlap`` (sends beside
    compute) those the schedule's order puts on the critical path (``exposed_sends``), else
    every send of every micro-batch and chunk, and the p − 1 boundaries of the fill and drain
    besides. The step (``time.step._pp_exposed``) and the planner's bounds share it."""
    if p == 1:
        return 0
    if overlap:
        return exposed_sends(schedule, p, m, v)
    chunks = v if schedule is Schedule.interleaved else 1
    return P2P_SENDS_PER_MICROBATCH * (m * chunks + p - 1)


def bubble_time_s(schedule: Schedule, p: int, m: int, times: StageTimes, v: int = 1) -> float:
    """Idle time of one rank per step.

    GPipe, 1F1B: (p-1)(F+B+W) (GPipe §2.3; Narayanan 2021 §2.2.1); interleaved: (p-1)(F+B+W)/v
    (Narayanan 2021 §2.2.2); ZB-H1: (p-1)(F+B-W) (Qi et al. 2023 §3.1); DualPipe:
    (p/2-1)(F&B + B_full - 3W) with B_full = B + W (DeepSeek-V3 report Table 2).
    """
    f, b, w = times.forward_s, times.backward_input_s, times.backward_weight_s
    if schedule in (Schedule.gpipe, Schedule.one_f_one_b):
        return (p - 1) * times.full_s
    if schedule is Schedule.interleaved:
        return (p - 1) * times.full_s / v
    if schedule is Schedule.zb_h1:
        return (p - 1) * max(0.0, f + b - w)
    half = p / DUALPIPE_DIRECTIONS - 1
    return max(0.0, half * (times.fb_s + (b + w) - 3 * w))


def bubble_ratio(schedule: Schedule, p: int, m: int, times: StageTimes, v: int = 1) -> float:
    """Bubble over useful compute, bubble / (m·(F+B+W)): (p-1)/m for 1F1B (seed 000: 21.9%)."""
    return bubble_time_s(schedule, p, m, times, v) / (m * times.full_s)


def bubble_share(schedule: Schedule, p: int, m: int, times: StageTimes, v: int = 1) -> float:
    """Bubble as a share of the step, bubble / (bubble + m·(F+B+W)): (p-1)/(m+p-1) for 1F1B
    (Narayanan et al. 2021 §2.2.1; seed 000: 17.9%)."""
    bubble = bubble_time_s(schedule, p, m, times, v)
    return bubble / (bubble + m * times.full_s)


def in_flight_chunks(schedule: Schedule, p: int, m: int, v: int, rank: int) -> int:
    """Micro-batch × chunk activations ``rank`` keeps at its peak (a chunk = L/(p·v) layers).

    GPipe: all m (Huang et al. 2019). 1F1B and ZB-H1: p - rank, at most m (Narayanan 2021
    §2.2.1; Qi et al. 2023 §3.1 keeps 1F1B's peak). Interleaved: Megatron-LM's warm-up
    2(p-r-1) + (v-1)p, plus the one in steady state, at most m·v — for rank 0, p·v + p - 1, which
    is Korthikanti et al. 2022 §4.2.3's factor 1 + (p-1)/(p·v) on p stages. DualPipe: p + 1
    (DeepSeek-V3 Table 2).
    """
    if schedule is Schedule.gpipe:
        return m
    if schedule in (Schedule.one_f_one_b, Schedule.zb_h1):
        return min(p - rank, m)
    if schedule is Schedule.interleaved:
        return min(2 * (p - rank - 1) + (v - 1) * p + 1, m * v)
    return p + DUALPIPE_EXTRA_IN_FLIGHT
