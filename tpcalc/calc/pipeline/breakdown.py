"""The pipeline breakdown of one model on one layout: what ``tpcalc pipeline`` prints.

Formulas and their sources live in ``tpcalc.calc.pipeline.schedule``; this module feeds them a
model (layers, parameters per stage from ``tpcalc.calc.params.counts``) and a card (achieved
FLOP/s, links).
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec import Struct

from tpcalc.calc.dp.gradients import (
    BACKWARD_INPUT_FLOP_PER_PARAM_TOKEN,
    BACKWARD_WEIGHT_FLOP_PER_PARAM_TOKEN,
    FORWARD_FLOP_PER_PARAM_TOKEN,
)
from tpcalc.calc.layout.memory import rank_activation_bytes
from tpcalc.calc.links.collectives import Collective
from tpcalc.calc.links.link import LatencySteps, Link, link_nodes, ring_steps, steps_time_s
from tpcalc.calc.params.counts import (
    active_layer_params,
    declared_params,
    embedding_params,
    final_norm_params,
    last_stage_embedding_copy,
    layer_params,
    lm_head_matmul_params,
    lm_head_params,
    mtp_params,
)
from tpcalc.calc.pipeline import schedule as pp
from tpcalc.calc.pipeline.schedule import StageTimes, rank_layers
from tpcalc.choices import Schedule
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.units import Dtype

SRC_TIMES = (
    "F = 2·N_stage·s·b/(t·achieved), B = W = F (Qi et al. 2023 §2: matmul B and W cost as F)"
)


def stage_params(
    spec: ModelSpec, p: int, v: int, schedule: Schedule, counts: Sequence[int] | None = None
) -> tuple[int, ...]:
    """Parameters each rank stores: its layers; embedding and declared parts (vision tower) on
    the first stage; final norm, LM head and MTP on the last (DeepSeek-V3 §3.2 puts MTP there),
    with the last stage's copy of the embedding where the two ends are on different ranks
    (``params.counts.last_stage_embedding_copy``: a tied output layer, or MTP's embedding).
    ``counts``: the layers of each virtual stage when set by hand (``pipeline.stage_split``)."""
    layers = [layer_params(spec, i) for i in range(spec.num_hidden_layers)]
    return pp.rank_params(
        layers, p, v,
        embedding_params=embedding_params(spec) + declared_params(spec),
        lm_head_params=lm_head_params(spec),
        other_params=final_norm_params(spec) + mtp_params(spec)
        + last_stage_embedding_copy(spec, p, schedule, mtp=True),
        schedule=schedule, counts=counts,
    )  # fmt: skip


def stage_matmul_params(
    spec: ModelSpec, p: int, v: int, counts: Sequence[int] | None = None
) -> tuple[int, ...]:
    """Parameters each token multiplies on each rank: its layers (active experts only), + the LM
    head matrix (V·h even when tied) and final norm on the last stage; the lookup-only embedding
    is left out (seed 000's matmul parameters)."""
    layers = [active_layer_params(spec, i) for i in range(spec.num_hidden_layers)]
    return pp.rank_params(
        layers, p, v, embedding_params=0, lm_head_params=lm_head_matmul_params(spec),
        other_params=final_norm_params(spec), counts=counts,
    )  # fmt: skip


def flop_stage_times(
    spec: ModelSpec, hw: HardwareSpec, *, p: int, v: int, tokens: int, tp: int,
    counts: Sequence[int] | None = None,
) -> StageTimes:  # fmt: skip
    """F, B, W of the slowest rank for one micro-batch of ``tokens`` tokens, from 2·N FLOP each
    (``counts``: a split set by hand, as in ``stage_params``)."""
    n = max(stage_matmul_params(spec, p, v, counts))
    rate = tp * hw.achieved_flop_per_s.value
    return StageTimes(
        FORWARD_FLOP_PER_PARAM_TOKEN * n * tokens / rate,
        BACKWARD_INPUT_FLOP_PER_PARAM_TOKEN * n * tokens / rate,
        BACKWARD_WEIGHT_FLOP_PER_PARAM_TOKEN * n * tokens / rate,
    )


class PipelineActivations(Struct, frozen=True):
    """The activations of the most loaded rank, given each layer's bytes for one micro-batch."""

    rank: int
    layers: int
    in_flight: int
    per_layer_min_bytes: float
    per_layer_max_bytes: float
    stage_activation_bytes: float


class PipelineBreakdown(Struct, frozen=True):
    """Layers and parameters per stage, p2p bytes and time, bubble and in-flight micro-batches
    of one pipeline layout. Labels, formulas and sources: ``breakdown_explain``."""

    # inputs the formulas substitute
    schedule: Schedule
    num_layers: int
    p: int
    m: int
    v: int
    seq: int
    micro_batch: int
    hidden_size: int
    tp: int
    dtype_bytes: int
    scatter_gather: bool
    link: Link
    with_latency: bool
    latency_steps: LatencySteps
    times_given: bool  # F, B, W given by the caller, not 2·N_stage FLOP each
    stage_matmul_params_max: int
    achieved_flop_per_s: float
    in_flight_chunks: int
    split_by_hand: bool  # the layers of each virtual stage set by hand (pipeline.stage_split)
    # the result
    stage_layers: tuple[int, ...]  # layers on each rank (its v chunks)
    layers_per_stage_max_count: int
    stage_params_max: int
    param_copies_count: int
    p2p_bytes_per_microbatch: float
    p2p_send_bytes_per_rank: float
    p2p_time_s: float
    forward_time_s: float
    backward_input_time_s: float
    backward_weight_time_s: float
    compute_time_s: float
    bubble_time_s: float
    step_time_s: float
    bubble_ratio: float
    bubble_share_ratio: float
    bubble_vs_1f1b_ratio: float
    in_flight_microbatches: float  # an int when v divides the in-flight chunks
    activations: PipelineActivations | None


def pipeline_breakdown(
    spec: ModelSpec,
    hw: HardwareSpec,
    *,
    p: int,
    m: int,
    v: int = 1,
    schedule: Schedule = Schedule.one_f_one_b,
    seq: int,
    micro_batch: int,
    tp: int = 1,
    dtype: Dtype = Dtype.bf16,
    scatter_gather: bool = True,
    link: Link,
    allow_uneven: bool = True,
    times: StageTimes | None = None,
    layer_act_bytes: float | Sequence[float] | None = None,
    with_latency: bool = False,
    nodes: int | None = None,
    counts: Sequence[int] | None = None,
) -> PipelineBreakdown:
    """Layers and parameters per stage, p2p bytes and time, bubble, in-flight activations.

    ``times`` defaults to ``flop_stage_times``; ``layer_act_bytes`` is each layer's activations
    for one micro-batch on one rank (``layout.memory.layer_activation_bytes``; one number = the
    same for every layer), used for the most loaded stage. ``nodes`` = nodes the pipeline group
    spans (default ``links.link_nodes``): each send pays α_inter when they are more than one,
    else α_intra. ``counts``: the layers of each of the p·v virtual stages when set by hand
    (``pipeline.stage_split``: first/last stage layers, a pipeline layout, the embedding and
    loss counted as layers), else the even split. Raises a TpcalcError for an impossible split
    (see ``pipeline.check_pipeline``).
    """
    L = spec.num_hidden_layers
    by_hand = counts is not None
    pp.check_pipeline(L, p, m, v, schedule, allow_uneven=allow_uneven, by_hand=by_hand)
    layers = pp.rank_layer_counts(L, p, v, counts)
    params = stage_params(spec, p, v, schedule, counts)
    t = times or flop_stage_times(
        spec, hw, p=p, v=v, tokens=seq * micro_batch, tp=tp, counts=counts
    )
    msg = pp.p2p_bytes(
        seq, micro_batch, spec.hidden_size, dtype, tp=tp, scatter_gather=scatter_gather
    )
    sends = pp.p2p_sends_per_rank(schedule, p, m, v)
    steps = ring_steps(Collective.p2p, p, link_nodes(link, p) if nodes is None else nodes, sends)
    bubble = pp.bubble_time_s(schedule, p, m, t, v)
    ref = pp.bubble_time_s(Schedule.one_f_one_b, p, m, t)
    chunks = max(pp.in_flight_chunks(schedule, p, m, v, r) for r in range(p))
    return PipelineBreakdown(
        schedule=schedule, num_layers=L, p=p, m=m, v=v, seq=seq, micro_batch=micro_batch,
        hidden_size=spec.hidden_size, tp=tp, dtype_bytes=dtype.bytes,
        scatter_gather=scatter_gather, link=link, with_latency=with_latency,
        latency_steps=steps, times_given=times is not None,
        stage_matmul_params_max=max(stage_matmul_params(spec, p, v, counts)),
        achieved_flop_per_s=hw.achieved_flop_per_s.value, in_flight_chunks=chunks,
        split_by_hand=by_hand,
        stage_layers=tuple(layers),
        layers_per_stage_max_count=max(layers),
        stage_params_max=max(params),
        param_copies_count=pp.DUALPIPE_PARAM_COPIES if schedule is Schedule.dualpipe else 1,
        p2p_bytes_per_microbatch=msg,
        p2p_send_bytes_per_rank=sends * msg,
        p2p_time_s=steps_time_s(sends * msg, steps, hw, link, with_latency=with_latency),
        forward_time_s=t.forward_s,
        backward_input_time_s=t.backward_input_s,
        backward_weight_time_s=t.backward_weight_s,
        compute_time_s=m * t.full_s,
        bubble_time_s=bubble,
        step_time_s=m * t.full_s + bubble,
        bubble_ratio=pp.bubble_ratio(schedule, p, m, t, v),
        bubble_share_ratio=pp.bubble_share(schedule, p, m, t, v),
        bubble_vs_1f1b_ratio=bubble / ref if ref else 0.0,
        in_flight_microbatches=chunks // v if chunks % v == 0 else chunks / v,
        activations=(
            None
            if layer_act_bytes is None
            else pipeline_activations(schedule, p, m, v, L, layer_act_bytes, counts)
        ),
    )  # fmt: skip


def pipeline_activations(
    schedule: Schedule, p: int, m: int, v: int, num_layers: int,
    layer_act_bytes: float | Sequence[float], counts: Sequence[int] | None = None,
) -> PipelineActivations:  # fmt: skip
    """The activations of the most loaded rank (``layout.memory.rank_activation_bytes``);
    ``counts``: a split set by hand, as in ``stage_params``."""
    per_layer = (
        [float(layer_act_bytes)] * num_layers
        if isinstance(layer_act_bytes, int | float)
        else list(layer_act_bytes)
    )
    loads = rank_activation_bytes(schedule, p, m, v, per_layer, counts=counts)
    rank = max(range(p), key=lambda r: loads[r])
    mine = [per_layer[i] for i in rank_layers(num_layers, p, v, counts)[rank]]
    return PipelineActivations(
        rank=rank,
        layers=len(mine),
        in_flight=pp.in_flight_chunks(schedule, p, m, v, rank),
        per_layer_min_bytes=min(mine),
        per_layer_max_bytes=max(mine),
        stage_activation_bytes=loads[rank],
    )
